package klm

// Caps are the translation capabilities of a device, as the driver reads
// them from QUERY_HCA_CAP.
type Caps struct {
	// MaxMkeys is the size of a function's mkey table (indices below it).
	MaxMkeys uint32
	// LogMaxKLMListSize bounds the entries of one translation (KLM, KSM,
	// MTT, or repeat-block entries): 1 << LogMaxKLMListSize.
	LogMaxKLMListSize uint8
	// MaxIndirection bounds how many indirect keys (KLM, KSM, repeat
	// block) one access may pass through.
	MaxIndirection uint8
	// MaxRepeatEntries bounds the entries of a repeat block.
	MaxRepeatEntries uint16
	// MinLogPageSize and MaxLogPageSize bound an MTT page or KSM entity.
	MinLogPageSize, MaxLogPageSize uint8
}

// ConnectX5 is a ConnectX-5-like preset. The values are chosen to be those
// of a ConnectX-5 as far as public sources tell (docs/DEVICE.md lists them).
var ConnectX5 = Caps{
	MaxMkeys:          1 << 20,
	LogMaxKLMListSize: 16,
	MaxIndirection:    4,
	MaxRepeatEntries:  16,
	MinLogPageSize:    12,
	MaxLogPageSize:    30,
}

// MaxListEntries returns the largest number of entries in one translation.
func (c *Caps) MaxListEntries() uint32 { return 1 << c.LogMaxKLMListSize }

// MaxFastRegPageListLen returns what mlx5 reports as
// max_fast_reg_page_list_len: 1 << log_max_klm_list_size.
func (c *Caps) MaxFastRegPageListLen() uint32 { return c.MaxListEntries() }
