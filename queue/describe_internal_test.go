package queue

import "testing"

// The operators' calls read the locks the consumers take: the names must agree.
func TestAdminLockNamesAreTheConsumers(t *testing.T) {
	for _, dead := range []bool{false, true} {
		c := &Consumer{name: "orders|x", group: "billing", dead: dead}
		for _, kind := range []string{"m", "p"} {
			for _, n := range []int{0, 7, 4100} {
				if got, want := adminLockName(c.name, c.group, kind, dead, n), c.lockName(kind, n); got != want {
					t.Fatalf("adminLockName(%q, %v, %d) = %q, the consumer's is %q", kind, dead, n, got, want)
				}
			}
		}
	}
}
