package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"time"
)

// childFlag starts this binary as a fleet of simulated agents.
const childFlag = "-fleet-child"

// child is the parent's handle on a fleet process.
type child struct {
	name string
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Scanner
	mu   sync.Mutex
}

// startChild runs this program again as a fleet process.
func startChild(name string) (*child, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("fleet %s: %w", name, err)
	}
	cmd := exec.Command(exe, childFlag)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("fleet %s: %w", name, err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("fleet %s: %w", name, err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("fleet %s: start: %w", name, err)
	}
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	return &child{name: name, cmd: cmd, in: in, out: sc}, nil
}

// do sends one command and waits for its reply.
func (c *child) do(cmd command) (reply, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b, err := json.Marshal(cmd)
	if err != nil {
		return reply{}, err
	}
	if _, err := c.in.Write(append(b, '\n')); err != nil {
		return reply{}, fmt.Errorf("fleet %s: %s: %w", c.name, cmd.Op, err)
	}
	if !c.out.Scan() {
		return reply{}, fmt.Errorf("fleet %s: %s: no reply (%v)", c.name, cmd.Op, c.out.Err())
	}
	var r reply
	if err := json.Unmarshal(c.out.Bytes(), &r); err != nil {
		return reply{}, fmt.Errorf("fleet %s: %s: %w", c.name, cmd.Op, err)
	}
	if r.Err != "" {
		return r, fmt.Errorf("fleet %s: %s: %s", c.name, cmd.Op, r.Err)
	}
	return r, nil
}

// must is do for commands that cannot fail once the fleet runs.
func (c *child) must(op string) reply {
	r, err := c.do(command{Op: op})
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleetbench:", err)
	}
	return r
}

// stop asks the fleet to quit and waits for it (killing it after 10s).
func (c *child) stop() {
	_, _ = c.do(command{Op: "quit"})
	_ = c.in.Close()
	done := make(chan error, 1)
	go func() { done <- c.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = c.cmd.Process.Kill()
		<-done
	}
}
