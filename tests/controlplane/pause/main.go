// Command pause is the test node's sandbox image: the process that holds a pod's namespaces
// while its containers come and go, as Kubernetes' own pause does. It sleeps until SIGTERM or
// SIGINT and reaps any child it inherits (it is PID 1 when a pod shares its process namespace).
// Built as a static binary and packaged FROM scratch, so the node needs no registry.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for received := range signals {
		if received != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
