package app

import (
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

func TestValidate(t *testing.T) {
	for name, tc := range map[string]struct {
		args []string
		want []string // substrings of the error; none: valid
	}{
		"defaults":      {},
		"test settings": {args: []string{"--bridge-notice=40s", "--bridge-margin=5s", "--bridge-resume-timeout=10s", "--resync=5s", "--sqs-wait-time=1s", "--leader-elect=false"}},
		"every mistake at once": {
			args: []string{"--bridge-margin=200s", "--resync=0", "--sqs-wait-time=30s", "--kube-api-qps=0", "--ebs-gib-month-price=-1"},
			want: []string{"bridge margin", "--resync", "--sqs-wait-time", "--kube-api-qps", "prices"},
		},
		"lease without a name": {args: []string{"--leader-election-id="}, want: []string{"--leader-election-id"}},
		"no lease needed":      {args: []string{"--leader-elect=false", "--leader-election-id="}},
		"no namespace":         {args: []string{"--namespace="}, want: []string{"--namespace"}},
		"no visibility":        {args: []string{"--sqs-visibility-timeout=0s"}, want: []string{"--sqs-visibility-timeout"}},
		"negative window":      {args: []string{"--telemetry-window=-1h"}, want: []string{"--telemetry-window"}},
		"reclaim-back off":     {args: []string{"--reclaim-back=off"}},
		"no seat image":        {args: []string{"--seat-image= "}, want: []string{"--seat-image"}},
		"mirrored seat image":  {args: []string{"--seat-image=registry.example.com/pause:3.10"}},
		"reclaim-back typo":    {args: []string{"--reclaim-back=on", "--reclaim-back-poll=0s"}, want: []string{"--reclaim-back \"on\"", "--reclaim-back-poll"}},
	} {
		t.Run(name, func(t *testing.T) {
			o := NewOptions()
			fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
			o.AddFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			err := o.Validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate passed, want errors naming %v", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %q", err, w)
				}
			}
		})
	}
}

func TestCompleteQueueURLAlias(t *testing.T) {
	o := NewOptions()
	o.QueueURL = "https://sqs.us-east-1.amazonaws.com/123/lifeboat"
	if err := o.Complete(); err != nil {
		t.Fatal(err)
	}
	if o.AWS.InterruptionQueueURL != o.QueueURL {
		t.Errorf("interruption queue URL %q, want the --queue-url alias %q", o.AWS.InterruptionQueueURL, o.QueueURL)
	}
	if o.AWS.MaxBackoff != 20*time.Second {
		t.Errorf("AWS defaults not completed: max backoff %s", o.AWS.MaxBackoff)
	}
}
