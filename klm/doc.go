// Package klm is hcasim's memory-key translation layer: each function's DMA
// address space ([Memory]), the memory-key table ([Table]) with the mlx5
// access modes (PA, MTT, KLM, KSM and the strided repeat block), the binary
// layouts of translation entries, and [Table.Resolve], which turns (key,
// address, length, access) into segments of host memory or a typed [Fault].
//
// The device reaches data only through keys. Resolution yields slices of
// the mapped buffers themselves, never copies, so the data mover can copy
// straight from source to destination. Translations are looked up when
// data moves, so an unmapped region or an invalidated key faults at the
// next access instead of reading stale memory.
//
// Mkeys are immutable values: the table publishes a new *Mkey for every
// change (a UMR builds it from the current one), so resolution reads a
// consistent key without locks while registrations go on.
package klm
