// Command lifeboat-controller runs the warm-pool controllers (docs/WARMPOOL.md). See
// pkg/controllers/app for its flags.
package main

import (
	"os"

	"k8s.io/component-base/cli"

	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/app"
)

func main() {
	os.Exit(cli.Run(app.NewCommand()))
}
