package gateway

import (
	"fmt"
	"slices"
)

// ManagerError returns why a namespace's Lookup last failed to reach the
// Manager (lookup.Lookup.ManagerError), naming the namespace, or nil while
// every Lookup is connected. Routers that do not say (Config.NewRouter's)
// count as connected. A refusal of the gateway's certificate for a
// namespace, which retrying does not lift, has status.Code
// PermissionDenied or Unauthenticated; leasehold gateway stops on it.
func (g *Gateway) ManagerError() error {
	names := make([]string, 0, len(g.spaces))
	for name := range g.spaces {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		r, ok := g.spaces[name].router.(interface{ ManagerError() error })
		if !ok {
			continue
		}
		if err := r.ManagerError(); err != nil {
			return fmt.Errorf("namespace %q: %w", name, err)
		}
	}
	return nil
}
