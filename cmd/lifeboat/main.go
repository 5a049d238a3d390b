// Command lifeboat is Lifeboat's CLI: `sim`, `status` and `pdb` (see pkg/cli).
package main

import (
	"os"

	"github.com/lifeboat-k8s/lifeboat/pkg/cli"
)

func main() {
	if err := cli.NewCommand().Execute(); err != nil {
		os.Exit(1)
	}
}
