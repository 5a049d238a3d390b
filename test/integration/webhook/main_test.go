// Package webhook tests lifeboat-webhook against the real local control plane: kube-apiserver
// calls the real webhook process over TLS, with the webhook configurations from
// manifests/webhook/ (only the clientConfig is pointed at 127.0.0.1).
//
// The webhook runs as a child process: this test binary re-executes itself with
// LIFEBOAT_WEBHOOK_PROCESS=1 and runs lifeboat-webhook's command line, so "webhook down" is a
// real process stopped by SIGTERM.
package webhook

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/lifeboat-k8s/lifeboat/pkg/localcluster"
	"github.com/lifeboat-k8s/lifeboat/webhooks/server"
)

const processEnv = "LIFEBOAT_WEBHOOK_PROCESS"

// profileDirEnv, when set, makes BenchmarkPodCreateLatency record CPU profiles of kube-apiserver
// there (the apiserver is then started with --profiling).
const profileDirEnv = "LIFEBOAT_BENCH_PROFILE_DIR"

// shared is the control plane of the package's tests (etcd, kube-apiserver and
// kube-controller-manager, so Deployments and Jobs create Pods). Tests use their own namespaces.
var shared *localcluster.Cluster

func TestMain(m *testing.M) {
	if os.Getenv(processEnv) == "1" {
		cmd := server.NewCommand()
		cmd.SetArgs(os.Args[1:])
		if err := cmd.Execute(); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	flag.Parse()
	if testing.Short() {
		// Every test here needs the control plane; -short is "no control plane" (make test-unit).
		fmt.Println("-short: not starting the local control plane; the webhook's integration tests do not run")
		return 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	opts := localcluster.Options{ControllerManager: true}
	if os.Getenv(profileDirEnv) != "" {
		opts.ExtraAPIServerFlags = append(opts.ExtraAPIServerFlags, "--profiling=true")
	}
	c, err := localcluster.Start(ctx, opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "start local control plane: %v\n", err)
		return 1
	}
	shared = c
	code := m.Run()
	if code != 0 {
		fmt.Fprintf(os.Stderr, "component logs (tails) from %s:\n%s\n", c.RunDir(), c.LogTails(4000))
	}
	if err := c.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "stop local control plane: %v\n", err)
		return 1
	}
	return code
}
