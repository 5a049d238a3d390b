// Package bridge tests the bridge of issue 13 (hold → surge → move, docs/WARMPOOL.md "Bridge")
// against real components: the local control plane (etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler, KWOK) with Karpenter and its KWOK provider,
// lifeboat-webhook (the validating webhook on pods/eviction), lifeboat-scheduler and
// lifeboat-controller as the built binaries from bin/, and the AWS emulator (EC2 + SQS on
// loopback, in this process, its instances mirrored as KWOK Nodes).
//
// The control plane, the emulator, the webhook and the scheduler are shared by the package's
// tests (started by the first test that needs them, stopped by TestMain); every test starts its
// own lifeboat-controller process with the bridge flags it needs and stops it at its end. Tests
// run one after the other and use their own namespaces; each waits until the warm pool is back
// to standby before it interrupts anything.
package bridge

import (
	"fmt"
	"os"
	"testing"

	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
)

func TestMain(m *testing.M) {
	klog.SetOutput(os.Stderr)
	ctrl.SetLogger(klog.Background())
	code := m.Run()
	if err := stopShared(code != 0); err != nil {
		fmt.Fprintf(os.Stderr, "stop the shared environment: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}
