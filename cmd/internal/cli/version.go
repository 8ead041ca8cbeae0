package cli

import "runtime/debug"

// Version is what leasehold --version prints: set by the build
// (cmd/leasehold's main.version, -ldflags "-X main.version=v1.2.3"; the
// image's build does), else the module's version, else "devel".
var Version = moduleVersion()

func moduleVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "devel"
}
