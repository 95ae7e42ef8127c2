//go:build !amd64 || purego

package t10dif

// archImpls implements the dispatch contract in guard.go: no assembly here.
func archImpls() []Impl { return nil }
