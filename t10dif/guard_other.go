//go:build !amd64 || purego

package t10dif

// archImpls implements the dispatch contract in guard.go: no assembly here.
func archImpls() []Impl { return nil }

func archCRC16(implID, uint16, []byte) uint16 { panic("t10dif: no assembly implementations") }
func archCopyCRC16(implID, uint16, []byte, []byte) uint16 {
	panic("t10dif: no assembly implementations")
}
func archCRC64(implID, uint64, []byte) uint64 { panic("t10dif: no assembly implementations") }
func archCopyCRC64(implID, uint64, []byte, []byte) uint64 {
	panic("t10dif: no assembly implementations")
}
func archCopyCRC16Blocks(implID, uint16, []byte, []byte, int, int, int, []uint16) bool {
	return false
}
