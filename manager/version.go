package manager

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/leasehold/leasehold/internal/version"
)

// VersionKey is the header metadata key in which a replica answering
// Status names its build (version.Info.Short: the module version, or the
// revision for a build from a working tree), so leasehold status shows each
// replica's version during a rolling upgrade. A header rather than a field
// of the answer: a replica built before it simply sends none, and the
// answer's encoding is the same for every version.
const VersionKey = "leasehold-version"

// sayVersion sets the VersionKey header of a unary call.
func sayVersion(ctx context.Context) {
	// SetHeader fails only outside a call; the answer stands without it.
	_ = grpc.SetHeader(ctx, metadata.Pairs(VersionKey, version.Get().Short()))
}

// Version is the version this replica reports (VersionKey).
func Version() string { return version.Get().Short() }
