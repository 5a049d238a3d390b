// Package awsemutest holds the AWS emulator's test-only helpers (tests import it; the shipped
// binaries never do).
package awsemutest

import (
	"testing"

	"github.com/lifeboat-k8s/lifeboat/pkg/cloud/awsemu"
)

// StartT starts an emulator on loopback for a test and closes it when the test ends.
func StartT(t testing.TB, opts awsemu.Options) *awsemu.Server {
	t.Helper()
	s, err := awsemu.Start(awsemu.New(opts), "127.0.0.1:0")
	if err != nil {
		t.Fatalf("start AWS emulator: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("stop AWS emulator: %v", err)
		}
	})
	return s
}
