package main

// Golden tests: every testdata/*.json request is answered and compared with
// testdata/expected/<name>.json after normalize() (timings dropped, shareIDs masked).
// Regenerate with: go test -run TestGolden -update

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/expected/*.json")

func TestGolden(t *testing.T) {
	files, err := filepath.Glob("testdata/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no testdata: %v", err)
	}
	for _, file := range files {
		name := filepath.Base(file)
		t.Run(strings.TrimSuffix(name, ".json"), func(t *testing.T) {
			in, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			got, err := json.Marshal(handleTop(json.RawMessage(in)))
			if err != nil {
				t.Fatal(err)
			}
			var v any
			if err := json.Unmarshal(got, &v); err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			enc := json.NewEncoder(&buf)
			enc.SetEscapeHTML(false)
			enc.SetIndent("", "  ")
			if err := enc.Encode(normalize(v)); err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", "expected", name)
			if *update {
				if err := os.MkdirAll(filepath.Dir(golden), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(golden, buf.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test -update)", err)
			}
			if !bytes.Equal(want, buf.Bytes()) {
				t.Errorf("answer for %s differs from %s:\n%s", file, golden, buf.String())
			}
		})
	}
}

// normalize removes what differs from run to run.
func normalize(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for _, k := range []string{"elapsedMicros", "newAllocatorMicros", "elapsedMicrosRuns"} {
			delete(v, k)
		}
		if _, ok := v["shareID"]; ok {
			v["shareID"] = "<random>"
		}
		for k, x := range v {
			v[k] = normalize(x)
		}
	case []any:
		for i, x := range v {
			v[i] = normalize(x)
		}
	}
	return v
}

func TestStreamAndErrors(t *testing.T) {
	for _, tc := range []struct{ in, wantSubstr string }{
		{`{"mode":"nope"}`, `unknown mode`},
		{`{"mode":"cel","expresions":[]}`, `unknown field`},
		{`{"mode":"allocate"}`, `node: missing`},
		{`{"batch":[{"mode":"features"}],"x":1}`, `must be the only key`},
		{`{"mode":"features","featureGates":{"NoSuchGate":true}}`, `unrecognized feature gate`},
	} {
		got, _ := json.Marshal(handleTop(json.RawMessage(tc.in)))
		if !strings.Contains(string(got), tc.wantSubstr) {
			t.Errorf("%s: got %s, want it to contain %q", tc.in, got, tc.wantSubstr)
		}
	}
}
