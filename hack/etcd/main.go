// Command etcd is the stock etcd server, built from the module graph so that the local control
// plane (pkg/localcluster) needs no download beyond the Go module proxy.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
