package testvectors_test

import (
	"fmt"
	"log"
	"strings"

	"github.com/hcasim/hcasim/testvectors"
)

// Parse cases (JSON Lines, FORMAT.md) and run them against the t10dif
// engine: a case passes when nothing differs from its expectation.
func ExampleParse() {
	const vectors = `{"id":"ex-1","op":"crc","desc":"catalogue check","params":{"algo":"crc16_t10dif"},"input":{"data":{"ascii":"123456789"}},"input_len":9,"input_sha256":"15e2b0d3c33891ebb0f1ef609ec419420c20e320ce94c65fbc8c3312448eb225","expected":{"value":"0xd0db"}}
{"id":"ex-2","op":"crc","desc":"a wrong expectation","params":{"algo":"crc16_t10dif"},"input":{"data":{"ascii":"123456789"}},"input_len":9,"input_sha256":"15e2b0d3c33891ebb0f1ef609ec419420c20e320ce94c65fbc8c3312448eb225","expected":{"value":"0xd0dc"}}
`
	cases, err := testvectors.Parse(strings.NewReader(vectors))
	if err != nil {
		log.Fatal(err)
	}
	for i := range cases {
		r := cases[i].Run()
		fmt.Println(cases[i].ID, r.Passed(), r.Diffs)
	}
	// Output:
	// ex-1 true []
	// ex-2 false [value: got 0xd0db, want 0xd0dc]
}

// Run every vector file of a directory, as hcasim conform does.
func ExampleFiles() {
	files, err := testvectors.Files([]string{"."}) // the *.jsonl files of this package's directory, in name order
	if err != nil {
		log.Fatal(err)
	}
	for _, f := range files {
		cases, err := testvectors.Load(f) // a malformed line fails the file, naming the line
		if err != nil {
			log.Fatal(err)
		}
		failed := 0
		for i := range cases {
			if r := cases[i].Run(); !r.Passed() {
				fmt.Println("FAIL", cases[i].ID, r.Diffs)
				failed++
			}
		}
		fmt.Printf("%s: %d failed\n", f, failed)
	}
	// Output:
	// generated.jsonl: 0 failed
	// public.jsonl: 0 failed
}
