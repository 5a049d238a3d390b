// Command lifeboat-webhook serves Lifeboat's admission webhooks. See docs/POLICY.md.
package main

import (
	"os"

	"k8s.io/component-base/cli"

	"github.com/lifeboat-k8s/lifeboat/webhooks/server"
)

func main() {
	os.Exit(cli.Run(server.NewCommand()))
}
