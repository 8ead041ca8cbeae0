package kv

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"time"
)

// postPeer posts body to path on the peer kv server at addr over the
// servers' mutual-TLS client, retrying with jittered backoff from wait up
// to most while the failure may pass: a transport error, or a status
// retryable says may. Migrations and standby writes both go this way.
func (s *Server) postPeer(ctx context.Context, addr, path string, body []byte, wait, most time.Duration, retryable func(status int) bool) error {
	for {
		retry, err := s.postPeerOnce(ctx, addr, path, body, retryable)
		if err == nil || !retry {
			return err
		}
		t := time.NewTimer(wait/2 + rand.N(wait/2))
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w; last: %w", ctx.Err(), err)
		case <-t.C:
		}
		wait = min(2*wait, most)
	}
}

// postPeerOnce sends one request; retry says whether a failure may pass.
func (s *Server) postPeerOnce(ctx context.Context, addr, path string, body []byte, retryable func(int) bool) (retry bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.scheme+"://"+addr+path, bytes.NewReader(body))
	if err != nil {
		return false, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.peers.Do(req)
	if err != nil {
		return ctx.Err() == nil, err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if resp.StatusCode/100 == 2 {
		return false, nil
	}
	return retryable(resp.StatusCode), fmt.Errorf("%s answered %s: %s", addr, resp.Status, firstLine(msg))
}
