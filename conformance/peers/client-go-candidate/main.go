// Command client-go-candidate is a candidate in a Kubernetes Lease election
// run by client-go's own leader election (tools/leaderelection with a
// resourcelock.LeaseLock), as a controller built on client-go runs it: the
// conformance suite's real client-go peer, built from Debian's
// golang-k8s-client-go-dev by conformance/peers/build.sh.
//
// Usage:
//
//	client-go-candidate [flags] KUBECONFIG
//
// It connects with the kubeconfig at KUBECONFIG and client-go's defaults
// (typed clients send and accept protobuf), campaigns for the Lease
// --namespace/--name as --identity, and writes one JSON line per event on
// stdout, stamped with CLOCK_MONOTONIC in nanoseconds so lines from several
// processes on one machine can be ordered:
//
//	{"event":"new_leader","identity":"a","leader":"b","monotonic_ns":123}
//	{"event":"started_leading","identity":"a","monotonic_ns":124}
//	{"event":"stopped_leading","identity":"a","was_leading":true,"monotonic_ns":125}
//	{"event":"exited","identity":"a","reason":"cancelled","monotonic_ns":126}
//
// stopped_leading is client-go's OnStoppedLeading, which it calls whenever
// its Run returns, leading or not: was_leading says whether started_leading
// came before. On stdin EOF or SIGTERM the election's context is cancelled;
// with ReleaseOnCancel client-go then releases a held Lease (an update that
// empties holderIdentity) before stopped_leading, and the program exits 0
// (exited's reason "cancelled"). client-go's Run also returns when a leader
// fails to renew within RenewDeadline: the program then writes
// stopped_leading and exits 1 (reason "lost"), as a controller built on
// RunOrDie exits when it loses the lease; a harness starts a new process to
// campaign again. stopped_leading comes up to RenewDeadline after the last
// renewal that succeeded, and client-go runs OnStartedLeading on a
// goroutine of its own, so its stamp follows the acquiring update's answer.
//
// The three durations default to client-go's documented ones (15 s, 10 s,
// 2 s); --lease-duration alone scales the other two in the same ratio.
// client-go writes the Lease's leaseDurationSeconds as whole seconds, so it
// must be at least 1s.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// client-go's documented defaults (tools/leaderelection's
// LeaderElectionConfig docs; kube-controller-manager's flag defaults).
const (
	defaultLeaseDuration = 15 * time.Second
	defaultRenewDeadline = 10 * time.Second
	defaultRetryPeriod   = 2 * time.Second
)

// monotonicNanos is CLOCK_MONOTONIC, the clock every process of the suite
// stamps its lines with (Go's time.Now keeps a monotonic reading too, but
// from an origin of its own).
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
		fmt.Fprintf(os.Stderr, "client-go-candidate: stdout: %v\n", err)
		os.Exit(1)
	}
}

func main() {
	identity := flag.String("identity", "", "this candidate's holderIdentity (required)")
	namespace := flag.String("namespace", "default", "the Lease's namespace")
	name := flag.String("name", "", "the Lease's name (required)")
	leaseDuration := flag.Duration("lease-duration", defaultLeaseDuration, "LeaseDuration (at least 1s)")
	renewDeadline := flag.Duration("renew-deadline", 0, "RenewDeadline (default: lease-duration * 10/15)")
	retryPeriod := flag.Duration("retry-period", 0, "RetryPeriod (default: lease-duration * 2/15)")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: client-go-candidate [flags] KUBECONFIG\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 || *identity == "" || *name == "" {
		flag.Usage()
		os.Exit(2)
	}
	// In whole seconds of the defaults, so the product cannot overflow.
	scaled := func(d time.Duration) time.Duration {
		return *leaseDuration * (d / time.Second) / (defaultLeaseDuration / time.Second)
	}
	if *renewDeadline == 0 {
		*renewDeadline = scaled(defaultRenewDeadline)
	}
	if *retryPeriod == 0 {
		*retryPeriod = scaled(defaultRetryPeriod)
	}

	config, err := clientcmd.BuildConfigFromFlags("", flag.Arg(0))
	if err != nil {
		fmt.Fprintf(os.Stderr, "client-go-candidate: kubeconfig %s: %v\n", flag.Arg(0), err)
		os.Exit(2)
	}
	clientset, err := kubernetes.NewForConfig(config)
	if err != nil {
		fmt.Fprintf(os.Stderr, "client-go-candidate: client: %v\n", err)
		os.Exit(2)
	}

	out := &events{out: json.NewEncoder(os.Stdout), identity: *identity}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// stdin EOF (the harness closing our stdin, or dying) and SIGTERM both
	// end the candidacy the way a controller's shutdown does: by
	// cancelling the election's context.
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-signals
		cancel()
	}()

	var leading atomic.Bool
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: *namespace, Name: *name},
		Client:     clientset.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: *identity},
	}
	// RunOrDie panics on a config it refuses (say a RenewDeadline not
	// below LeaseDuration), which is the exit a wrong flag deserves.
	leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   *leaseDuration,
		RenewDeadline:   *renewDeadline,
		RetryPeriod:     *retryPeriod,
		ReleaseOnCancel: true,
		Name:            *name,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(context.Context) {
				leading.Store(true)
				out.emit("started_leading", nil)
			},
			OnStoppedLeading: func() {
				out.emit("stopped_leading", map[string]any{"was_leading": leading.Swap(false)})
			},
			OnNewLeader: func(leader string) {
				out.emit("new_leader", map[string]any{"leader": leader})
			},
		},
	})
	if ctx.Err() == nil {
		out.emit("exited", map[string]any{"reason": "lost"})
		os.Exit(1)
	}
	out.emit("exited", map[string]any{"reason": "cancelled"})
}
