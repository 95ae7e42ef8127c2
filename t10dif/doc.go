// Package t10dif is hcasim's protection-information engine: the guard
// algorithms (CRC-16/T10-DIF, the IP-checksum guard, CRC-32C, CRC-64/NVME),
// the PI tuple formats (8-byte T10 PI and 16-byte NVMe 64b-guard PI), and
// the per-block operations an integrity-offload HCA performs while data
// moves: generate (insert), verify, strip, pass and translate, over
// interleaved (DIF) and separate (DIX) metadata layouts, one-shot or as a
// stream that accepts input split anywhere.
//
// The package knows nothing about queues or memory keys; the signature
// pipeline of the device feeds it segments of host memory.
//
// # Guards
//
// [CRC16], [CRC64NVMe], [CRC32C] and [IPChecksum] follow the conventions of
// the standard library's hash packages: the first argument is the value
// returned by a previous call (0 to start), so that
// CRC16(CRC16(0, a), b) == CRC16(0, a‖b). On amd64 the CRCs use
// carry-less-multiply folding in assembly (VPCLMULQDQ with AVX-512 where the
// CPU has it, PCLMULQDQ otherwise), chosen once at start; elsewhere, or with
// the purego build tag, a slicing-by-16 table implementation. [Impls] lists
// the implementations usable on this machine for tests and benchmarks.
//
// # Operations
//
// A [Domain] describes one side of an operation: the PI format, guard type,
// protection interval, metadata size and position, DIF type, tags, escape
// rule and seed. A [Config] joins an input and an output domain with the
// check mask (which bytes of the input tuple are verified, in the IB byte
// encoding) and the copy mask (which bytes of the output tuple are copied
// from the input tuple rather than generated). [Generate], [Verify],
// [Strip], [Pass] and [Translate] are the common configurations;
// [Apply] runs any Config one-shot and [Stream] runs it over input and
// output split anywhere.
//
// A PI mismatch is not a failure of the operation: like an HCA, the
// operation produces all of its output and reports the first mismatch as an
// [*Error] (which matches [ErrGuard], [ErrRefTag] or [ErrAppTag] under
// errors.Is). Bad parameters are reported as errors matching [ErrParam] and
// a more specific sentinel.
package t10dif
