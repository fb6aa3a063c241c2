// Command etcd is etcd's own server main, built from the module graph of
// Kubernetes so the harness runs the etcd version Kubernetes is tested with.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
