package keyname

import "testing"

func TestSplit(t *testing.T) {
	for _, c := range []struct {
		in, name, suffix string
		ok               bool
	}{
		{"election:3:abc", "abc", "", true},
		{"semaphore:3:a/b/7", "a/b", "/7", true},
		{"rwlock:5:x:1:y/w", "x:1:y", "/w", true},
		{"election:3:ab", "", "", false},   // shorter than LEN
		{"election:03:abc", "", "", false}, // leading zero
		{"election:+3:abc", "", "", false}, // sign
		{"election:0:", "", "", false},     // empty name
		{"election::abc", "", "", false},   // no LEN
		{"election3:abc", "", "", false},   // no colon after the prefix
		{"elect:3:abc", "", "", false},     // another prefix
		{"electionx:3:abc", "", "", false}, // another prefix
		{"election:99999999999999999999:a", "", "", false},
	} {
		name, suffix, ok := Split(c.in, c.in[:min(len(c.in), len(prefixOf(c.in)))])
		if ok != c.ok || name != c.name || suffix != c.suffix {
			t.Errorf("Split(%q) = %q, %q, %v; want %q, %q, %v", c.in, name, suffix, ok, c.name, c.suffix, c.ok)
		}
	}
}

// prefixOf is the prefix the test passes: the known one the input starts with.
func prefixOf(s string) string {
	for _, p := range []string{"semaphore", "election", "rwlock"} {
		if len(s) >= len(p) && s[:len(p)] == p {
			return p
		}
	}
	return "election"
}

func TestIndex(t *testing.T) {
	for in, want := range map[string]int{"0": 0, "7": 7, "1023": 1023} {
		if got, ok := Index(in); !ok || got != want {
			t.Errorf("Index(%q) = %d, %v", in, got, ok)
		}
	}
	for _, in := range []string{"", "01", "+1", "-1", "1a", " 1"} {
		if _, ok := Index(in); ok {
			t.Errorf("Index(%q) ok", in)
		}
	}
}
