package main

import (
	"github.com/spf13/cobra"
)

func devCommand() *cobra.Command {
	return &cobra.Command{Use: "dev", Short: "Run TaskForge locally with embedded PostgreSQL and Redis", Hidden: true,
		RunE: func(cmd *cobra.Command, _ []string) error { return nil }}
}
