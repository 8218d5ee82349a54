// Package keyname splits the store names that packages election, semaphore and rwlock
// build as PREFIX:LEN:NAME[SUFFIX], LEN the length of NAME in bytes in decimal. Each of
// those packages keeps its own format (prefix and suffixes) and parses with Split.
package keyname

import "strconv"

// Split parses s as prefix + ":" + LEN + ":" + NAME + suffix, where LEN is len(NAME)
// in canonical decimal (no sign, no leading zero). It returns NAME and the suffix (what
// follows NAME, possibly empty); ok is false when s is not of that form.
func Split(s, prefix string) (name, suffix string, ok bool) {
	if len(s) < len(prefix)+1 || s[:len(prefix)] != prefix || s[len(prefix)] != ':' {
		return "", "", false
	}
	rest := s[len(prefix)+1:]
	i := 0
	for i < len(rest) && rest[i] >= '0' && rest[i] <= '9' {
		i++
	}
	if i == 0 || i == len(rest) || rest[i] != ':' || (i > 1 && rest[0] == '0') {
		return "", "", false
	}
	n, err := strconv.Atoi(rest[:i])
	rest = rest[i+1:]
	if err != nil || n < 1 || n > len(rest) {
		return "", "", false
	}
	return rest[:n], rest[n:], true
}

// Index parses s as a canonical non-negative decimal (no sign, no leading zero but for
// "0"); ok is false otherwise.
func Index(s string) (int, bool) {
	if s == "" || (len(s) > 1 && s[0] == '0') {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.Atoi(s)
	return n, err == nil
}
