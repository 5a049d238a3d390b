// Package localclustertest holds the test-only helpers of the local control plane: tests import
// it, the shipped binaries never do (make verify checks that no package of cmd/ links testing).
package localclustertest

import (
	"context"
	"testing"
	"time"

	"k8s.io/klog/v2"

	"github.com/lifeboat-k8s/lifeboat/pkg/localcluster"
)

// StartT starts a cluster for a test: it fails the test on error, stops the cluster in
// t.Cleanup, and prints the tail of every component log when the test failed.
func StartT(t testing.TB, opts localcluster.Options) *localcluster.Cluster {
	t.Helper()
	if opts.Logf == nil {
		opts.Logf = t.Logf
	}
	ctx := klog.NewContext(context.Background(), klog.Background())
	began := time.Now()
	c, err := localcluster.Start(ctx, opts)
	if err != nil {
		t.Fatalf("start local control plane: %v", err)
	}
	t.Logf("local control plane up in %s (run dir %s)", time.Since(began).Round(time.Millisecond), c.RunDir())
	c.KeepRunDirIf(t.Failed)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("component logs (tails) from %s:\n%s", c.RunDir(), c.LogTails(6000))
		}
		if err := c.Stop(); err != nil {
			t.Errorf("stop local control plane: %v", err)
		}
	})
	return c
}
