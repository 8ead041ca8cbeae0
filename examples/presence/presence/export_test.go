package presence

import (
	"net/http"

	"github.com/leasehold/leasehold/lookup"
)

// Transport returns c's HTTP transport, and SetTransport replaces it, for a
// test that stands between the client and its servers.
func (c *Client) Transport() http.RoundTripper     { return c.http.Transport }
func (c *Client) SetTransport(t http.RoundTripper) { c.http.Transport = t }

// NotifyLoss delivers loss to c as its Lookup's upcall would.
func (c *Client) NotifyLoss(loss lookup.Loss) { c.onLoss(loss) }
