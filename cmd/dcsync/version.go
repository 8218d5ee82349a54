package main

import (
	"fmt"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// versionString is what 'dcsync version' and 'dcsync --version' print after "dcsync ":
// the module version ("(devel)" for a build from a checkout, vX.Y.Z for go install
// ...@vX.Y.Z), the VCS revision and commit time the go command stamped into the binary
// (with "-dirty" when the work tree had changes), and the Go version. Parts the binary
// does not carry (go run, go test, -buildvcs=false) are "unknown".
func versionString() string {
	version, revision, at, goVersion := "unknown", "unknown", "unknown", "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		goVersion = bi.GoVersion
		if bi.Main.Version != "" {
			version = bi.Main.Version
		}
		dirty := false
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				revision = s.Value
			case "vcs.time":
				at = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if dirty && revision != "unknown" {
			revision += "-dirty"
		}
	}
	return fmt.Sprintf("%s revision %s (%s) %s", version, revision, at, goVersion)
}

func newVersionCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the module version and VCS revision of this binary",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, args []string) error {
			fmt.Fprintln(a.stdout, "dcsync", versionString())
			return nil
		},
	}
}
