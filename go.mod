module github.com/hcasim/hcasim

go 1.26.0

require (
	github.com/google/gopacket v1.1.19
	github.com/stretchr/testify v1.12.1
	golang.org/x/sync v0.25.0
	golang.org/x/sys v0.50.0
)

require (
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/net v0.0.0-20190620200207-3b0461eec859 // indirect
)
