package owner

import (
	"context"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// RefusedMetadata is the gRPC metadata key of a refusal: RefusedHeader in
// the lower case gRPC metadata requires.
var RefusedMetadata = strings.ToLower(RefusedHeader)

// RefuseGRPC returns the error a gRPC handler returns to refuse a call under
// the Owner contract: status Unavailable, with the header metadata
// leasehold-refused: not-owner or moving. Return it before sending any
// message: the gateway reads the refusal from the headers and the status
// from the trailers of an answer without messages.
func RefuseGRPC(ctx context.Context, why Refusal, msg string) error {
	if why != RefusedMoving {
		why = RefusedNotOwner
	}
	_ = grpc.SetHeader(ctx, metadata.Pairs(RefusedMetadata, string(why))) // outside a call there is nothing to set
	return status.Error(codes.Unavailable, msg)
}
