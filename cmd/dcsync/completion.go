package main

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/queue"
)

// Shell completion ('dcsync completion bash|zsh|fish|powershell', cobra's): --level
// offers dc and xdc, and the NAME of a lock, latch or queue command offers the client's
// existing locks or latches, or the store's queues, read from the store the command line names (--store,
// --client, or their environment variables) within completionTimeout. A store that
// cannot list, or cannot be reached in time, offers nothing.

// completionTimeout bounds the store read of one completion.
const completionTimeout = 2 * time.Second

// addCompletions wires completion into the command tree under root.
func addCompletions(a *app, root *cobra.Command) {
	levels := func(_ *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		var out []string
		for _, l := range []string{"dc\tthis farm", "xdc\tall farms"} {
			if strings.HasPrefix(l, toComplete) {
				out = append(out, l)
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Flags().Lookup("level") != nil {
			_ = c.RegisterFlagCompletionFunc("level", levels)
		}
		if p := c.Parent(); p != nil && c.Runnable() && c.ValidArgsFunction == nil {
			switch {
			case p.Name() == "lock" && c.Name() != "list":
				c.ValidArgsFunction = a.completeNames(lockNames)
			case p.Name() == "latch" && c.Name() != "list" && c.Name() != "create":
				c.ValidArgsFunction = a.completeNames(latchNames)
			case p.Name() == "queue" && c.Name() != "list" && c.Name() != "create":
				c.ValidArgsFunction = a.completeNames(queueNames)
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// completeNames completes a command's first argument with the names list returns.
func (a *app) completeNames(list func(context.Context, driver.Store, string) ([]string, error)) cobra.CompletionFunc {
	return func(c *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		if len(args) > 0 || a.client == "" {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		ctx, cancel := context.WithTimeout(context.Background(), completionTimeout)
		defer cancel()
		s, err := a.open(ctx)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		names, err := list(ctx, s, a.client)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var out []string
		for _, n := range names {
			if strings.HasPrefix(n, toComplete) {
				out = append(out, n)
			}
		}
		slices.Sort(out)
		return slices.Compact(out), cobra.ShellCompDirectiveNoFileComp
	}
}

// lockNames lists the names of client's live locks, when the store can list.
func lockNames(ctx context.Context, s driver.Store, client string) ([]string, error) {
	ll, ok := s.(driver.LockLister)
	if !ok {
		return nil, nil
	}
	locks, err := ll.ListLocks(ctx, client)
	names := make([]string, 0, len(locks))
	for _, l := range locks {
		names = append(names, l.Key.Name)
	}
	return names, err
}

// queueNames lists the names of the store's queues, when the store can list them.
func queueNames(ctx context.Context, s driver.Store, _ string) ([]string, error) {
	if _, ok := s.(driver.QueueLister); !ok {
		return nil, nil
	}
	specs, err := queue.List(ctx, s)
	names := make([]string, 0, len(specs))
	for _, sp := range specs {
		names = append(names, sp.Name)
	}
	return names, err
}

// latchNames lists the names of client's live latches, when the store can list.
func latchNames(ctx context.Context, s driver.Store, client string) ([]string, error) {
	ll, ok := s.(driver.LatchLister)
	if !ok {
		return nil, nil
	}
	latches, err := ll.ListLatches(ctx, client)
	names := make([]string, 0, len(latches))
	for _, l := range latches {
		names = append(names, l.Key.Name)
	}
	return names, err
}
