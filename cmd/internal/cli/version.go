package cli

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/leasehold/leasehold/internal/version"
)

func init() { register(newVersionCommand) }

func newVersionCommand(e *env) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print this build's version: the module version, the VCS revision, and the Go version",
		Long: `Print which build of leasehold this is, as the go command recorded it in the
binary: the module version (a release tag with 'go install …@vX.Y.Z', or
"(devel)" for a build from a working tree), the VCS revision and time and
whether the tree had uncommitted changes ('go build' in a git checkout; not
'go run'), and the Go version. 'leasehold --version' prints the same line.
Every Manager replica reports its version to 'leasehold status' and as the
leasehold_build_info metric; docs/operations.md#upgrades says which versions
may run together.

With --json: {"module":"…","version":"…","revision":"…","time":"…",
"modified":false,"go":"go1.26.0"}.`,
		Args: cobra.NoArgs,
		RunE: run(func(context.Context, []string) error {
			i := version.Get()
			if asJSON {
				return json.NewEncoder(e.stdout).Encode(map[string]any{"module": i.Module, "version": i.Version,
					"revision": i.Revision, "time": i.Time, "modified": i.Modified, "go": i.Go})
			}
			fmt.Fprintln(e.stdout, i.String())
			return nil
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of text")
	return cmd
}
