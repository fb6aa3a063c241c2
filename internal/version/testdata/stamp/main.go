// Command stamp prints version.Get(). TestMakefileStampReachesGet builds it
// with the Makefile's -X flag.
package main

import (
	"fmt"

	"github.com/node-drainer/node-drainer/internal/version"
)

func main() { fmt.Print(version.Get()) }
