// Command symgen writes the export table of hcasim's replacement
// libibverbs.so.1 from the host's installed rdma-core libraries, so that
// the replacement defines every symbol and version node they do and never
// drifts from them by hand:
//
//	go run ./ibverbs/symgen -map OUT.map -stubs OUT.c -header DIR LIB...
//
// For each LIB (an ELF shared object: libibverbs.so.1, libmlx5.so.1,
// libefa.so.1) it reads the version definitions and the defined dynamic
// symbols. It writes
//
//   - a linker version script with every version node, in the order and
//     with the dependencies the library defines, each listing the names
//     whose default version it is (local: * hides everything else);
//   - a C file with a weak stub for every default-version name (the front
//     end's real implementations override them at link time) and a stub
//     bound with .symver to every non-default (compat) version.
//
// A stub prints "hcasim: unimplemented: NAME" on its first call and fails
// in the way the name's declaration in the installed headers allows:
// functions returning a pointer return NULL, void ones return, the others
// return EOPNOTSUPP; errno is EOPNOTSUPP in every case. Names no header
// declares (the provider-private IBVERBS_PRIVATE_* interface) return
// EOPNOTSUPP if they are ibv_cmd_* or execute_ioctl (int in rdma-core's
// driver.h) and 0 (NULL) otherwise.
package main

import (
	"bytes"
	"debug/elf"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// Symbol is one exported (name, version) pair of a library.
type Symbol struct {
	Name    string
	Version string
	Default bool // the version a new link binds to (name@@VERSION)
}

// Node is a version node of a library.
type Node struct {
	Name string
	Deps []string
}

// Library is what symgen reads from one shared object.
type Library struct {
	Path    string
	Nodes   []Node
	Symbols []Symbol
}

// errNoVersions reports a library without version definitions.
var errNoVersions = errors.New("symgen: library has no version definitions")

// Read reads a library's version nodes and defined, versioned dynamic
// symbols (functions and objects; the absolute symbols that name the
// versions themselves are left out).
func Read(path string) (*Library, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	defer f.Close()
	vers, err := f.DynamicVersions()
	if err != nil || len(vers) == 0 {
		return nil, fmt.Errorf("read %s: %w", path, errNoVersions)
	}
	lib := &Library{Path: path}
	for _, v := range vers {
		if v.Flags&elf.VER_FLG_BASE != 0 {
			continue // the file's own name
		}
		lib.Nodes = append(lib.Nodes, Node{Name: v.Name, Deps: v.Deps})
	}
	syms, err := f.DynamicSymbols()
	if err != nil {
		return nil, fmt.Errorf("read %s: symbols: %w", path, err)
	}
	for _, s := range syms {
		t := elf.ST_TYPE(s.Info)
		if s.Section == elf.SHN_UNDEF || s.Section == elf.SHN_ABS || (t != elf.STT_FUNC && t != elf.STT_OBJECT) {
			continue
		}
		if elf.ST_BIND(s.Info) != elf.STB_GLOBAL && elf.ST_BIND(s.Info) != elf.STB_WEAK {
			continue
		}
		if !s.HasVersion || s.Version == "" {
			continue
		}
		lib.Symbols = append(lib.Symbols, Symbol{Name: s.Name, Version: s.Version, Default: !s.VersionIndex.IsHidden()})
	}
	sort.Slice(lib.Symbols, func(i, j int) bool {
		a, b := lib.Symbols[i], lib.Symbols[j]
		if a.Name != b.Name {
			return a.Name < b.Name
		}
		return a.Version < b.Version
	})
	return lib, nil
}

// Kind is how a stub fails.
type Kind uint8

// Stub kinds.
const (
	KindInt  Kind = iota // returns EOPNOTSUPP
	KindPtr              // returns NULL
	KindVoid             // returns nothing
	KindZero             // undeclared: returns 0
)

var (
	commentRE = regexp.MustCompile(`(?s)/\*.*?\*/|//[^\n]*`)
	ppRE      = regexp.MustCompile(`(?m)^[ \t]*#(?:[^\n]*\\\n)*[^\n]*$`)
	attrRE    = regexp.MustCompile(`__attribute(?:__)?\s*\(\((?:[^()]|\([^()]*\))*\)\)`)
	externCRE = regexp.MustCompile(`extern\s+"C"\s*\{`) // C++ guards: their '}' is then unmatched and ignored
)

// Kinds returns the stub kind of every function the headers declare
// (prototypes outside function bodies, static inline ones excluded).
func Kinds(headers []string) (map[string]Kind, error) {
	kinds := map[string]Kind{}
	for _, h := range headers {
		src, err := os.ReadFile(h)
		if err != nil {
			return nil, err
		}
		parseDecls(string(src), kinds)
	}
	return kinds, nil
}

var declRE = regexp.MustCompile(`([A-Za-z_][A-Za-z0-9_]*)\s*\(`)

// parseDecls adds the prototypes of src to kinds. It splits the
// preprocessed-away text at ';', '{' and '}' and reads each piece that
// starts with a return type and a name followed by '('.
func parseDecls(src string, kinds map[string]Kind) {
	src = commentRE.ReplaceAllString(src, " ")
	src = ppRE.ReplaceAllString(src, " ")
	src = attrRE.ReplaceAllString(src, " ")
	src = externCRE.ReplaceAllString(src, " ")
	depth := 0
	start := 0
	flush := func(end int) {
		stmt := strings.TrimSpace(src[start:end])
		start = end + 1
		if depth != 0 || stmt == "" {
			return
		}
		m := declRE.FindStringSubmatchIndex(stmt)
		if m == nil {
			return
		}
		name := stmt[m[2]:m[3]]
		prefix := strings.TrimSpace(stmt[:m[2]])
		if prefix == "" || strings.ContainsAny(prefix, "(=,") || strings.Contains(prefix, "static") ||
			strings.Contains(prefix, "typedef") || strings.Contains(prefix, "return") {
			return
		}
		if _, seen := kinds[name]; seen {
			return
		}
		prefix = strings.TrimSpace(strings.TrimPrefix(prefix, "extern"))
		switch {
		case strings.HasSuffix(prefix, "*"):
			kinds[name] = KindPtr
		case prefix == "void":
			kinds[name] = KindVoid
		default:
			kinds[name] = KindInt
		}
	}
	for i := 0; i < len(src); i++ {
		switch src[i] {
		case ';':
			flush(i)
		case '{':
			flush(i)
			depth++
		case '}':
			if depth > 0 {
				depth--
			}
			start = i + 1
		}
	}
}

// kindOf returns the stub kind of name.
func kindOf(kinds map[string]Kind, name string) Kind {
	if k, ok := kinds[name]; ok {
		return k
	}
	if strings.HasPrefix(name, "ibv_cmd_") || name == "execute_ioctl" {
		return KindInt
	}
	return KindZero
}

// WriteMap writes the version script for libs.
func WriteMap(w io.Writer, libs []*Library) error {
	var b bytes.Buffer
	b.WriteString("/* Generated by ibverbs/symgen from the installed rdma-core libraries; do not edit. */\n")
	// local: * goes in a node that holds no compat (non-default)
	// version: ld matches a .symver'd name@NODE against NODE's own
	// patterns, and a local: * there would hide it.
	compat := map[string]bool{}
	for _, lib := range libs {
		for _, s := range lib.Symbols {
			if !s.Default {
				compat[s.Version] = true
			}
		}
	}
	first := true
	for _, lib := range libs {
		fmt.Fprintf(&b, "\n/* %s */\n", filepath.Base(lib.Path))
		for _, n := range lib.Nodes {
			fmt.Fprintf(&b, "%s {\n", n.Name)
			var names []string
			for _, s := range lib.Symbols {
				if s.Default && s.Version == n.Name {
					names = append(names, s.Name)
				}
			}
			if len(names) > 0 {
				b.WriteString("  global:\n")
				for _, s := range names {
					fmt.Fprintf(&b, "    %s;\n", s)
				}
			}
			if first && !compat[n.Name] {
				b.WriteString("  local: *;\n")
				first = false
			}
			b.WriteString("}")
			if len(n.Deps) > 0 {
				b.WriteString(" " + strings.Join(n.Deps, " "))
			}
			b.WriteString(";\n")
		}
	}
	_, err := w.Write(b.Bytes())
	return err
}

// compatName is the local C name of a non-default version's stub.
func compatName(s Symbol) string {
	v := strings.NewReplacer(".", "_", "-", "_").Replace(s.Version)
	return "hcasim_compat_" + v + "_" + s.Name
}

// WriteStubs writes the stub C file for libs.
func WriteStubs(w io.Writer, libs []*Library, kinds map[string]Kind) error {
	var b bytes.Buffer
	b.WriteString(`/* Generated by ibverbs/symgen from the installed rdma-core libraries and
 * headers; do not edit. Every exported name gets a weak stub (the real
 * implementations override it) and every compat version a .symver'd stub.
 * A stub reports itself once on stderr and fails with EOPNOTSUPP. */
#include <errno.h>
#include <stddef.h>

void hcasim_unimplemented(const char *name, int *once);

#define STUB_INT(sym, label) \
	int sym(void) { static int once; hcasim_unimplemented(label, &once); errno = EOPNOTSUPP; return EOPNOTSUPP; }
#define STUB_PTR(sym, label) \
	void *sym(void) { static int once; hcasim_unimplemented(label, &once); errno = EOPNOTSUPP; return NULL; }
#define STUB_VOID(sym, label) \
	void sym(void) { static int once; hcasim_unimplemented(label, &once); errno = EOPNOTSUPP; }
#define STUB_ZERO(sym, label) \
	long sym(void) { static int once; hcasim_unimplemented(label, &once); errno = EOPNOTSUPP; return 0; }

`)
	macro := [...]string{KindInt: "STUB_INT", KindPtr: "STUB_PTR", KindVoid: "STUB_VOID", KindZero: "STUB_ZERO"}
	seen := map[string]bool{}
	for _, lib := range libs {
		fmt.Fprintf(&b, "/* %s */\n", filepath.Base(lib.Path))
		for _, s := range lib.Symbols {
			m := macro[kindOf(kinds, s.Name)]
			if s.Default {
				if seen[s.Name] {
					continue
				}
				seen[s.Name] = true
				fmt.Fprintf(&b, "__attribute__((weak)) %s(%s, %q)\n", m, s.Name, s.Name)
				continue
			}
			c := compatName(s)
			fmt.Fprintf(&b, "__asm__(\".symver %s, %s@%s\");\n", c, s.Name, s.Version)
			fmt.Fprintf(&b, "%s(%s, %q)\n", m, c, s.Name+"@"+s.Version)
		}
	}
	_, err := w.Write(b.Bytes())
	return err
}

func main() {
	mapOut := flag.String("map", "", "write the version script here")
	stubOut := flag.String("stubs", "", "write the stub C file here")
	hdrDir := flag.String("header", "/usr/include/infiniband", "directory of the installed rdma-core headers")
	flag.Parse()
	if flag.NArg() == 0 || *mapOut == "" || *stubOut == "" {
		fmt.Fprintln(os.Stderr, "usage: symgen -map OUT.map -stubs OUT.c [-header DIR] LIB...")
		os.Exit(2)
	}
	if err := run(*mapOut, *stubOut, *hdrDir, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "symgen:", err)
		os.Exit(1)
	}
}

func run(mapOut, stubOut, hdrDir string, paths []string) error {
	var libs []*Library
	for _, p := range paths {
		lib, err := Read(p)
		if err != nil {
			return err
		}
		libs = append(libs, lib)
	}
	headers, err := filepath.Glob(filepath.Join(hdrDir, "*.h"))
	if err != nil {
		return err
	}
	kinds, err := Kinds(headers)
	if err != nil {
		return err
	}
	var m, s bytes.Buffer
	if err := WriteMap(&m, libs); err != nil {
		return err
	}
	if err := WriteStubs(&s, libs, kinds); err != nil {
		return err
	}
	if err := os.WriteFile(mapOut, m.Bytes(), 0o644); err != nil {
		return err
	}
	return os.WriteFile(stubOut, s.Bytes(), 0o644)
}
