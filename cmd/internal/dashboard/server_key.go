package dashboard

import (
	"encoding/json"
	"fmt"
	"net/http"
)

// maxKeyBytes bounds a searched key.
const maxKeyBytes = 4 << 10

// serveKey answers the key search: GET /api/key?ns=NS&key=K → which Owner
// holds K in the table last drawn, and since when the dashboard has seen
// that lease (keyAnswer).
func (h *Hub) serveKey(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	key := q.Get("key")
	switch {
	case !q.Has("key"):
		http.Error(w, "key: missing (?key=K)", http.StatusBadRequest)
		return
	case len(key) > maxKeyBytes:
		http.Error(w, fmt.Sprintf("key of %d bytes: the limit is %d", len(key), maxKeyBytes), http.StatusBadRequest)
		return
	}
	a, ok := h.holderOf(q.Get("ns"), key)
	if !ok {
		http.Error(w, fmt.Sprintf("no namespace %q is drawn", q.Get("ns")), http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(a)
}
