package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/leasetable"
	"github.com/leasehold/leasehold/lookup"
)

func init() { register(newWatchCommand) }

func newWatchCommand(e *env) *cobra.Command {
	o := &clientOptions{}
	lo := &logOptions{}
	cmd := &cobra.Command{
		Use:   "watch",
		Short: "Print every change of the lease table and every loss notification as they happen",
		Long: `Follow a namespace's lease table the way a frontend's Lookup library does, and
print every change applied to the copy and every loss notification, until
interrupted (SIGINT or SIGTERM, exit code 0).

A full copy (the first one, or after the Manager's log moved on) is printed as
one summary line. A loss notification means the soft state of those ranges
may be gone; "all" means the Lookup could not sync for the Manager's sync
timeout and cannot vouch for anything.

With --json each event is one compact JSON object per line:
  {"event":"snapshot","time":"…","epoch":N,"lsn":N,"ranges":N,"free_ranges":N,"owners":N}
  {"event":"change","time":"…","epoch":N,"lsn":N,"start":"0x…","end":"0x…",
   "owner":"kv-1","addr":"127.0.0.1:8001","lgn":N,"migrated":false}
  {"event":"loss","id":N,"namespace":"default","at":"…","all":false,
   "ranges":[{"start":"0x…","end":"0x…"}],
   "owners":[{"owner":"kv-2","addr":"127.0.0.1:8002","ranges":[…]}],"time":"…"}
A loss event is the loss schema the gateway and the dashboard share
(docs/protocol.md, "Loss events"); owners names whose state was lost, and
time repeats at for the consumers of the first form, which had no id,
namespace or owners.
Keys are 0x and 16 hex digits; the end of the key space is 0x10000000000000000.
A change to a free range has owner "" and lgn 0.`,
		Example: `  leasehold watch
  leasehold watch --json | grep '"event":"loss"'`,
		Args: cobra.NoArgs,
		RunE: run(func(ctx context.Context, _ []string) error { return watch(ctx, e, o, lo) }),
	}
	o.addFlags(cmd, e, "watch namespace `NS`")
	lo.addLogFlags(cmd.Flags(), "warn")
	return cmd
}

func watch(ctx context.Context, e *env, o *clientOptions, lo *logOptions) error {
	if err := o.validate(); err != nil {
		return err
	}
	// Fail fast when the manager is down or the namespace unknown; once
	// watching, an unreachable Manager shows as loss notifications.
	st, err := o.status(ctx, o.namespace)
	if err != nil {
		return err
	}
	p := &watchPrinter{w: e.stdout, json: o.json, ns: o.namespace}
	opts, err := o.dialOptions()
	if err != nil {
		return err
	}
	l, err := lookup.New(ctx, lookup.Config{
		Connection: leasehold.Connection{
			DialOptions: opts,
			Manager:     o.manager,
			Namespace:   o.namespace,
			Logger:      lo.logger(e.stderr),
		},
		OnUpdate: p.update,
		OnLoss:   p.loss,
	})
	if err != nil {
		return err
	}
	if !o.json {
		fmt.Fprintf(e.stderr, "watching namespace %s at %s; interrupt to stop\n", o.namespace, o.manager)
	}
	if l.WaitSynced(ctx) == nil && l.LSN() == 0 {
		// The Lookup makes no upcall for a copy that is still the empty
		// table (LSN 0); say what it holds all the same.
		p.first(st.GetEpoch(), l.Segments())
	}
	<-ctx.Done()
	return l.Close() // delivers the upcalls already queued
}

// watchPrinter prints the Lookup's upcalls, which come on one goroutine,
// and the first copy when the upcalls say nothing of it.
type watchPrinter struct {
	w    io.Writer
	json bool
	now  func() time.Time // nil: time.Now

	mu      sync.Mutex   // guards the fields below and the writes
	printed bool         // a snapshot or a change was printed
	epoch   uint64       // of the last update printed
	lsn     keyspace.LSN // the newest change printed in epoch
	ns      string       // the namespace watched, for the loss events
	losses  uint64       // loss events printed, which number them
}

type snapshotEvent struct {
	Event      string `json:"event"`
	Time       string `json:"time"`
	Epoch      uint64 `json:"epoch"`
	LSN        uint64 `json:"lsn"`
	Ranges     int    `json:"ranges"`
	FreeRanges int    `json:"free_ranges"`
	Owners     int    `json:"owners"`
}

type changeEvent struct {
	Event    string `json:"event"`
	Time     string `json:"time"`
	Epoch    uint64 `json:"epoch"`
	LSN      uint64 `json:"lsn"`
	Start    string `json:"start"`
	End      string `json:"end"`
	Owner    string `json:"owner"`
	Addr     string `json:"addr"`
	LGN      uint64 `json:"lgn"`
	Migrated bool   `json:"migrated"`
}

// lossEvent is the loss schema (lookup.LossEvent, docs/protocol.md "Loss
// events"), with time, its at under the name watch's first form gave it.
type lossEvent struct {
	lookup.LossEvent
	Time string `json:"time"`
}

func (p *watchPrinter) time() time.Time {
	if p.now != nil {
		return p.now()
	}
	return time.Now()
}

// first prints the Lookup's first copy, an empty table at LSN 0, unless an
// upcall printed something already.
func (p *watchPrinter) first(epoch uint64, segs []leasetable.Segment) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.printed {
		p.epoch = epoch
		p.snapshot(p.time(), epoch, 0, segs)
	}
}

func (p *watchPrinter) update(u lookup.Update) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.time()
	if u.Epoch != p.epoch {
		p.epoch, p.lsn = u.Epoch, 0
	}
	if u.Update.Snapshot {
		p.snapshot(now, u.Epoch, u.Update.To, u.Update.Segments)
		return
	}
	for _, c := range u.Update.Changes {
		if c.LSN <= p.lsn {
			continue // the copy had it already: a push and an answer overlapped
		}
		p.lsn = c.LSN
		p.change(now, u.Epoch, c)
	}
}

func (p *watchPrinter) snapshot(now time.Time, epoch uint64, lsn keyspace.LSN, segs []leasetable.Segment) {
	ev := snapshotEvent{Event: "snapshot", Time: now.Format(time.RFC3339Nano), Epoch: epoch,
		LSN: uint64(lsn), Ranges: len(segs)}
	owners := map[string]bool{}
	for _, s := range segs {
		if s.Entry.Free() {
			ev.FreeRanges++
		} else {
			owners[s.Entry.Owner] = true
		}
	}
	ev.Owners = len(owners)
	p.lsn, p.printed = lsn, true
	p.print(ev, "%s snapshot epoch %d lsn %d: %s, %d free, %s", now.Format(time.TimeOnly+".000"),
		ev.Epoch, ev.LSN, count(ev.Ranges, "range"), ev.FreeRanges, count(ev.Owners, "owner"))
}

func (p *watchPrinter) change(now time.Time, epoch uint64, c leasetable.Change) {
	p.printed = true
	ev := changeEvent{Event: "change", Time: now.Format(time.RFC3339Nano), Epoch: epoch, LSN: uint64(c.LSN),
		Start: hexKey(c.Range.Start), End: hexEnd(c.Range), Owner: c.Entry.Owner, Addr: c.Entry.Addr,
		LGN: uint64(c.Entry.LGN), Migrated: c.Entry.Migrated}
	to := "free"
	if !c.Entry.Free() {
		to = fmt.Sprintf("%s at %s (lgn %d)", c.Entry.Owner, c.Entry.Addr, c.Entry.LGN)
		if c.Entry.Migrated {
			to += " migrated"
		}
	}
	p.print(ev, "%s change lsn %d [%s, %s) -> %s", now.Format(time.TimeOnly+".000"), c.LSN, ev.Start, ev.End, to)
}

func (p *watchPrinter) loss(l lookup.Loss) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.time()
	p.losses++
	ev := lossEvent{LossEvent: lookup.NewLossEvent(p.losses, p.ns, now, l), Time: now.Format(time.RFC3339Nano)}
	var text []string
	for _, r := range ev.Ranges {
		text = append(text, "["+r.Start+", "+r.End+")")
	}
	what := count(len(l.Ranges), "range")
	if len(l.Owners) > 0 {
		var held []string
		for _, o := range l.Owners {
			held = append(held, o.Owner)
		}
		what += " held by " + strings.Join(held, ", ")
	}
	what += ": " + strings.Join(text, " ")
	if l.All {
		what = "all ranges: no sync with the manager within its sync timeout"
	}
	p.print(ev, "%s LOSS %s", now.Format(time.TimeOnly+".000"), what)
}

// print writes one line: ev as JSON, or the text.
func (p *watchPrinter) print(ev any, format string, args ...any) {
	if p.json {
		b, err := json.Marshal(ev)
		if err != nil {
			panic(fmt.Sprintf("cli: marshal %T: %v", ev, err)) // plain structs always marshal
		}
		_, _ = p.w.Write(append(b, '\n'))
		return
	}
	fmt.Fprintf(p.w, format+"\n", args...)
}
