// Command up starts the full local control plane (etcd, kube-apiserver,
// kube-controller-manager, KWOK, Karpenter with its KWOK provider) in the foreground for
// hands-on use, and stops every component on Ctrl-C or SIGTERM. `make up` runs it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/lifeboat-k8s/lifeboat/pkg/localcluster"
)

func main() {
	binDir := flag.String("bin-dir", localcluster.DefaultBinDir(), "directory with the component binaries (make tools)")
	kubeconfig := flag.String("kubeconfig", ".lifeboat/kubeconfig", "where to write the admin kubeconfig")
	runDir := flag.String("run-dir", ".lifeboat/cluster", "certificates, data and component logs")
	bootDelay := flag.Duration("node-boot-delay", 0, "time from Node creation to Ready for Karpenter's nodes")
	flag.Parse()
	if err := run(*binDir, *kubeconfig, *runDir, *bootDelay); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func run(binDir, kubeconfig, runDir string, bootDelay time.Duration) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// A previous run's data would hold certificates of another CA: start clean.
	if err := os.RemoveAll(runDir); err != nil {
		return err
	}
	opts := localcluster.Options{
		BinDir:     binDir,
		RunDir:     runDir,
		KeepRunDir: true,
		Karpenter:  true,
		Logf:       func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) },
	}
	if bootDelay > 0 {
		opts.NodeBootDelays = []localcluster.DelayRule{{Selector: map[string]string{"karpenter.sh/nodepool": "default"}, Delay: bootDelay}}
	}
	began := time.Now()
	c, err := localcluster.Start(ctx, opts)
	if err != nil {
		return err
	}
	defer c.Stop()
	abs, err := filepath.Abs(kubeconfig)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(abs), 0o755); err != nil {
		return err
	}
	b, err := os.ReadFile(c.KubeconfigPath())
	if err != nil {
		return err
	}
	if err := os.WriteFile(abs, b, 0o600); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "local control plane up in %s; logs in %s; Ctrl-C stops it\n", time.Since(began).Round(time.Second), runDir)
	fmt.Printf("ready: export KUBECONFIG=%s\n", abs)
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			fmt.Fprintln(os.Stderr, "stopping every component...")
			return c.Stop()
		case <-tick.C:
			if err := c.Running(); err != nil {
				return err
			}
		}
	}
}
