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
	v := buildVersion()
	return fmt.Sprintf("%s revision %s (%s) %s", v.Version, v.Revision, v.Time, v.Go)
}

// versionJSON is what 'dcsync version --json' prints.
type versionJSON struct {
	Version  string `json:"version"`
	Revision string `json:"revision"`
	Time     string `json:"time"`
	Go       string `json:"go"`
}

// buildVersion reads the binary's build information (see versionString).
func buildVersion() versionJSON {
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
	return versionJSON{Version: version, Revision: revision, Time: at, Go: goVersion}
}

func newVersionCmd(a *app) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "version [--json]",
		Short: "Print the module version and VCS revision of this binary",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, args []string) error {
			if asJSON {
				return a.printJSON(buildVersion())
			}
			fmt.Fprintln(a.stdout, "dcsync", versionString())
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, `print {"version","revision","time","go"}`)
	return c
}
