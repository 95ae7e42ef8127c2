package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestParseDecls(t *testing.T) {
	src := `
/* a comment with int fake(void); inside */
#define ibv_macro(x) other(x)
#ifdef __cplusplus
extern "C" {
#endif
struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr,
			  size_t length, int access);
int ibv_dereg_mr(struct ibv_mr *mr);
void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents);
const char *ibv_wc_status_str(enum ibv_wc_status status);
extern __be64 ibv_get_device_guid(struct ibv_device *device);
static inline int ibv_inline_one(struct ibv_qp *qp) { return ibv_dereg_mr(0); }
typedef int (*cb_t)(void);
struct s { int (*op)(int); };
int ibv_attr(void) __attribute__((deprecated));
#ifdef __cplusplus
}
#endif
`
	k := map[string]Kind{}
	parseDecls(src, k)
	want := map[string]Kind{
		"ibv_reg_mr": KindPtr, "ibv_dereg_mr": KindInt, "ibv_ack_cq_events": KindVoid,
		"ibv_wc_status_str": KindPtr, "ibv_get_device_guid": KindInt, "ibv_attr": KindInt,
	}
	for n, w := range want {
		if g, ok := k[n]; !ok || g != w {
			t.Errorf("%s: kind %v (found %v), want %v", n, g, ok, w)
		}
	}
	for _, n := range []string{"fake", "ibv_inline_one", "cb_t", "op", "other", "ibv_macro"} {
		if _, ok := k[n]; ok {
			t.Errorf("%s taken for an exported prototype", n)
		}
	}
	if kindOf(k, "ibv_cmd_foo") != KindInt || kindOf(k, "verbs_open_device") != KindZero {
		t.Error("undeclared names: ibv_cmd_* are int, the rest zero")
	}
}

func TestWrite(t *testing.T) {
	libs := []*Library{{
		Path:  "libx.so.1",
		Nodes: []Node{{Name: "X_1.0"}, {Name: "X_1.1", Deps: []string{"X_1.0"}}},
		Symbols: []Symbol{
			{Name: "x_new", Version: "X_1.1", Default: true},
			{Name: "x_old", Version: "X_1.0", Default: false},
			{Name: "x_old", Version: "X_1.1", Default: true},
		},
	}}
	var m, s bytes.Buffer
	if err := WriteMap(&m, libs); err != nil {
		t.Fatal(err)
	}
	if err := WriteStubs(&s, libs, map[string]Kind{"x_new": KindPtr}); err != nil {
		t.Fatal(err)
	}
	ms := m.String()
	// local: * must not sit in X_1.0, which holds a compat version.
	for _, w := range []string{"X_1.0 {\n}", "X_1.1 {\n  global:\n    x_new;\n    x_old;\n  local: *;\n} X_1.0;"} {
		if !strings.Contains(ms, w) {
			t.Errorf("map lacks %q:\n%s", w, ms)
		}
	}
	ss := s.String()
	for _, w := range []string{`__attribute__((weak)) STUB_PTR(x_new, "x_new")`, `__attribute__((weak)) STUB_ZERO(x_old, "x_old")`,
		`".symver hcasim_compat_X_1_0_x_old, x_old@X_1.0"`} {
		if !strings.Contains(ss, w) {
			t.Errorf("stubs lack %q:\n%s", w, ss)
		}
	}
}

// FuzzParseDecls: any header text parses without panic, and every name
// found is an identifier that occurs in the text followed by '('.
func FuzzParseDecls(f *testing.F) {
	f.Add("int f(void);")
	f.Add("struct a *g(int x, char *y);\nvoid h(void);")
	f.Add("static inline int i(void) { return j(1); }")
	f.Add("/* x */ extern \"C\" { int k(void); }")
	f.Fuzz(func(t *testing.T, src string) {
		k := map[string]Kind{}
		parseDecls(src, k)
		for n, kind := range k {
			if n == "" || kind > KindZero || !strings.Contains(src, n) {
				t.Fatalf("name %q kind %v from %q", n, kind, src)
			}
		}
	})
}
