package t10dif

import (
	"fmt"
)

// Apply runs c once over whole buffers: src is the input, dst receives the
// output (ignored with Discard). The input must be a whole number of blocks.
// It returns the number of bytes written to dst.Data. A PI mismatch is
// returned as an *Error after all output has been produced; other errors
// match ErrParam and leave dst unspecified.
//
// dst and src may be the same buffers when both domains have the same
// geometry (operations in place); otherwise they must not overlap.
func Apply(c *Config, dst, src Buf) (int, error) {
	var s Stream
	if err := s.p.init(c); err != nil {
		return 0, err
	}
	p := &s.p
	in, out := &p.in, &p.out

	var blocks, dataLen int
	if in.pi {
		if len(src.Data)%in.unit != 0 {
			return 0, fmt.Errorf("input of %d bytes in blocks of %d: %w", len(src.Data), in.unit, ErrBadLength)
		}
		blocks = len(src.Data) / in.unit
		dataLen = blocks * in.interval
		if in.separate && len(src.Meta) < blocks*in.meta {
			return 0, fmt.Errorf("input metadata of %d bytes for %d blocks of %d: %w", len(src.Meta), blocks, in.meta, ErrShortBuffer)
		}
	} else {
		dataLen = len(src.Data)
	}
	outLen := 0
	if !p.discard {
		outLen = dataLen
	}
	if out.pi {
		if dataLen%out.interval != 0 {
			return 0, fmt.Errorf("data of %d bytes in output intervals of %d: %w", dataLen, out.interval, ErrBadLength)
		}
		blocks = dataLen / out.interval
		outLen = blocks * out.unit
		if out.separate && len(dst.Meta) < blocks*out.meta {
			return 0, fmt.Errorf("output metadata of %d bytes for %d blocks of %d: %w", len(dst.Meta), blocks, out.meta, ErrShortBuffer)
		}
	}
	if len(dst.Data) < outLen {
		return 0, fmt.Errorf("output of %d bytes needs %d: %w", len(dst.Data), outLen, ErrShortBuffer)
	}
	s.SetMeta(src.Meta, dst.Meta)
	s.inG.reset(in.guard, in.seed)
	s.outG.reset(out.guard, out.seed)
	n, _, err := s.Process(dst.Data[:outLen], src.Data)
	if err != nil {
		return n, err
	}
	return n, s.Close()
}

// Generate inserts PI: it copies data into dst laid out as d (interleaved,
// or data plus separate metadata) and generates every tuple.
func Generate(d Domain, dst Buf, data []byte) (int, error) {
	return Apply(&Config{Out: d}, dst, Buf{Data: data})
}

// GenerateInPlace fills the tuples of buf, already laid out as d with its
// data in place; the metadata bytes outside the tuple are kept.
func GenerateInPlace(d Domain, buf Buf) error {
	_, err := Apply(&Config{In: d, Out: d}, buf, buf)
	return err
}

// Verify checks src, laid out as d, under check; it returns the first
// mismatch as an *Error.
func Verify(d Domain, check CheckMask, src Buf) error {
	_, err := Apply(&Config{In: d, Check: check, Discard: true}, Buf{}, src)
	return err
}

// Strip verifies src, laid out as d, under check and copies its data without
// the metadata into dst. All data is copied; the first mismatch is returned
// as an *Error.
func Strip(d Domain, check CheckMask, dst []byte, src Buf) (int, error) {
	return Apply(&Config{In: d, Check: check}, Buf{Data: dst}, src)
}

// Pass verifies src, laid out as d, under check and copies it unchanged,
// tuples included, into dst.
func Pass(d Domain, check CheckMask, dst, src Buf) (int, error) {
	return Apply(&Config{In: d, Out: d, Check: check, Copy: CheckAll}, dst, src)
}

// Translate verifies src, laid out as in, under check and copies it into dst
// laid out as out with the tuple bytes selected by copyMask copied and the
// rest generated: a guard translation (IP checksum to CRC, say) copies the
// tags (CheckAppTag|CheckRefTag); a re-tagging copies the guard.
func Translate(in, out Domain, check, copyMask CheckMask, dst, src Buf) (int, error) {
	return Apply(&Config{In: in, Out: out, Check: check, Copy: copyMask}, dst, src)
}
