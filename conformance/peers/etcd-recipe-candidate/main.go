// Command etcd-recipe-candidate is a candidate in an etcd election run by
// etcd's own Go recipe, clientv3/concurrency (NewSession, NewElection,
// Campaign, Resign, Observe), as a Go service built on etcd's client runs
// it: the conformance suite's real peer for etcd's election recipe, built
// from Debian's golang-etcd-server-dev by conformance/peers/build.sh.
//
// Usage:
//
//	etcd-recipe-candidate [flags] ENDPOINT [ENDPOINT...]
//
// It opens a session (an etcd lease of --ttl seconds, kept alive by the
// client) on the etcd at the endpoints, observes the election --prefix, and
// campaigns in it with --identity as its value. It writes one JSON line per
// event on stdout, stamped with CLOCK_MONOTONIC in nanoseconds:
//
//	{"event":"new_leader","identity":"a","leader":"b","monotonic_ns":1}   an Observe answer
//	{"event":"started_leading","identity":"a","monotonic_ns":2}          Campaign returned
//	{"event":"resign_called","identity":"a","monotonic_ns":3}            just before Resign
//	{"event":"stopped_leading","identity":"a","reason":"resigned","monotonic_ns":4}
//	{"event":"session_lost","identity":"a","monotonic_ns":5}             the etcd lease ended
//	{"event":"exited","identity":"a","monotonic_ns":6}
//
// Commands on stdin, one a line: "resign" resigns a held election (and
// stops a campaign in progress); "campaign" campaigns again after a resign.
// On stdin EOF or SIGTERM it resigns if leading, revokes its session's lease
// and exits 0. If the session's lease ends under it (expired while the
// client could not reach etcd), it writes stopped_leading (reason
// "session_lost") if it was leading, then session_lost, and exits 1.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"golang.org/x/sys/unix"
)

// monotonicNanos is CLOCK_MONOTONIC, the clock every process of the suite
// stamps its lines with.
func monotonicNanos() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err)
	}
	return ts.Nano()
}

// events writes the event lines; one mutex so lines never interleave.
type events struct {
	mu       sync.Mutex
	out      *json.Encoder
	identity string
}

func (e *events) emit(event string, fields map[string]any) {
	line := map[string]any{"event": event, "identity": e.identity}
	for k, v := range fields {
		line[k] = v
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	line["monotonic_ns"] = monotonicNanos()
	if err := e.out.Encode(line); err != nil {
		fmt.Fprintf(os.Stderr, "etcd-recipe-candidate: stdout: %v\n", err)
		os.Exit(1)
	}
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "etcd-recipe-candidate: "+format+"\n", args...)
	os.Exit(2)
}

// campaign is one Campaign call in flight: cancel stops it, done is closed
// when it has returned, and err is what it returned.
type campaign struct {
	cancel context.CancelFunc
	done   chan struct{}
	err    error
}

func main() {
	identity := flag.String("identity", "", "this candidate's value in the election (required)")
	prefix := flag.String("prefix", "", "the election's key prefix (required)")
	ttl := flag.Int("ttl", 60, "the session's lease TTL in seconds (concurrency's default is 60)")
	timeout := flag.Duration("dial-timeout", 5*time.Second, "how long to wait for a connection")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: etcd-recipe-candidate [flags] ENDPOINT [ENDPOINT...]\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 || *identity == "" || *prefix == "" {
		flag.Usage()
		os.Exit(2)
	}

	client, err := clientv3.New(clientv3.Config{Endpoints: flag.Args(), DialTimeout: *timeout})
	if err != nil {
		fail("client: %v", err)
	}
	defer client.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	session, err := concurrency.NewSession(client, concurrency.WithTTL(*ttl), concurrency.WithContext(ctx))
	if err != nil {
		fail("session: %v", err)
	}
	election := concurrency.NewElection(session, *prefix)
	out := &events{out: json.NewEncoder(os.Stdout), identity: *identity}

	// Observe's first answer is the leader at the time, then one per change.
	go func() {
		for answer := range election.Observe(ctx) {
			if len(answer.Kvs) > 0 {
				out.emit("new_leader", map[string]any{"leader": string(answer.Kvs[0].Value)})
			}
		}
	}()

	commands := make(chan string)
	go func() {
		lines := bufio.NewScanner(os.Stdin)
		for lines.Scan() {
			commands <- strings.TrimSpace(lines.Text())
		}
		close(commands)
	}()
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)

	start := func() *campaign {
		c := &campaign{done: make(chan struct{})}
		var campaignCtx context.Context
		campaignCtx, c.cancel = context.WithCancel(ctx)
		go func() {
			defer close(c.done)
			c.err = election.Campaign(campaignCtx, *identity)
		}()
		return c
	}
	leading := false
	resign := func() {
		if !leading {
			return
		}
		out.emit("resign_called", nil)
		resignCtx, done := context.WithTimeout(context.Background(), *timeout)
		defer done()
		if err := election.Resign(resignCtx); err != nil {
			fmt.Fprintf(os.Stderr, "etcd-recipe-candidate: resign: %v\n", err)
		}
		leading = false
		out.emit("stopped_leading", map[string]any{"reason": "resigned"})
	}
	// stop ends a campaign in flight and waits for it; a Campaign that won
	// as it was stopped leaves this candidate leading, which resign ends.
	stop := func(c *campaign) {
		if c == nil {
			return
		}
		c.cancel()
		<-c.done
		if c.err == nil {
			leading = true
			out.emit("started_leading", nil)
		}
	}

	current := start()
	for {
		var won chan struct{}
		if current != nil {
			won = current.done
		}
		select {
		case <-won:
			if current.err != nil {
				fmt.Fprintf(os.Stderr, "etcd-recipe-candidate: campaign: %v\n", current.err)
			} else {
				leading = true
				out.emit("started_leading", nil)
			}
			current = nil
		case command, open := <-commands:
			if !open {
				stop(current)
				resign()
				revokeAndExit(session, out, *timeout)
			}
			switch command {
			case "resign":
				stop(current)
				current = nil
				resign()
			case "campaign":
				if current == nil && !leading {
					current = start()
				}
			case "":
			default:
				fmt.Fprintf(os.Stderr, "etcd-recipe-candidate: unknown command %q (resign, campaign)\n", command)
			}
		case <-signals:
			stop(current)
			resign()
			revokeAndExit(session, out, *timeout)
		case <-session.Done():
			if leading {
				out.emit("stopped_leading", map[string]any{"reason": "session_lost"})
			}
			out.emit("session_lost", nil)
			out.emit("exited", nil)
			os.Exit(1)
		}
	}
}

// revokeAndExit revokes the session's lease (so no key of ours outlives us)
// and exits 0.
func revokeAndExit(session *concurrency.Session, out *events, timeout time.Duration) {
	ctx, done := context.WithTimeout(context.Background(), timeout)
	defer done()
	if _, err := session.Client().Revoke(ctx, session.Lease()); err != nil {
		fmt.Fprintf(os.Stderr, "etcd-recipe-candidate: revoke: %v\n", err)
	}
	out.emit("exited", nil)
	os.Exit(0)
}
