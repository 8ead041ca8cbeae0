package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Webhook delivery: each loss notification is POSTed to every webhook URL
// as its LossEvent in JSON, with the header Leasehold-Loss-Id, in order,
// again and again with backoff (from webhookFirst, doubling, at most
// webhookMax) until the hook answers 2xx: at least once, for as long as the
// gateway runs. A hook so slow that the gateway forgets notifications it has
// not delivered (it keeps the last 1024) is told by the gap in the IDs.
const (
	webhookFirst   = 100 * time.Millisecond
	webhookMax     = 30 * time.Second
	webhookTimeout = 10 * time.Second // one attempt
)

func checkWebhook(u string) error {
	p, err := url.Parse(u)
	if err != nil {
		return fmt.Errorf("webhook %q: %w", u, err)
	}
	if p.Scheme != "http" && p.Scheme != "https" || p.Host == "" {
		return fmt.Errorf("webhook %q: want an http:// or https:// URL", u)
	}
	return nil
}

// deliver posts every loss notification after the one numbered after to
// the hook at u, until ctx ends.
func (g *Gateway) deliver(ctx context.Context, u string, client *http.Client, after uint64) {
	for {
		events, more := g.losses.since(after)
		for _, e := range events {
			if e.ID > after+1 {
				g.log.Warn("webhook: loss notifications forgotten before delivery", "url", u, "from", after+1, "to", e.ID-1)
				g.metrics.webhook.WithLabelValues(u, "forgotten").Add(float64(e.ID - after - 1))
			}
			if !g.post(ctx, u, client, e) {
				return
			}
			after = e.ID
		}
		select {
		case <-more:
		case <-ctx.Done():
			return
		}
	}
}

// post delivers one event, retrying until the hook answers 2xx; false if
// ctx ended first.
func (g *Gateway) post(ctx context.Context, u string, client *http.Client, e *LossEvent) bool {
	body, _ := json.Marshal(e)
	backoff := webhookFirst
	for {
		actx, cancel := context.WithTimeout(ctx, webhookTimeout)
		req, _ := http.NewRequestWithContext(actx, http.MethodPost, u, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Leasehold-Loss-Id", strconv.FormatUint(e.ID, 10))
		resp, err := client.Do(req)
		if err == nil {
			io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
			resp.Body.Close()
		}
		cancel()
		if err == nil && resp.StatusCode/100 == 2 {
			g.metrics.webhook.WithLabelValues(u, "delivered").Inc()
			return true
		}
		g.metrics.webhook.WithLabelValues(u, "failed").Inc()
		if err == nil {
			err = fmt.Errorf("answered %s", resp.Status)
		}
		g.log.Warn("webhook: delivery failed; retrying", "url", u, "loss", e.ID, "err", err, "in", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return false
		}
		backoff = min(2*backoff, webhookMax)
	}
}
