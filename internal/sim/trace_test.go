package sim

import (
	"fmt"
	"os"
	"testing"

	"github.com/leasehold/leasehold/protocol"
)

func TestTraceDebug(t *testing.T) {
	if os.Getenv("SIMTRACE") == "" {
		t.Skip()
	}
	cfg := scenario(*seedFlag)
	traceNode = os.Getenv("SIMTRACE")
	r := Run(cfg)
	fmt.Println(r.Violation)
	_ = protocol.Fast
}
