package main

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/taskforge/taskforge/migrations"
	"github.com/taskforge/taskforge/sealer"
	"github.com/taskforge/taskforge/storage"
)

// keysCommand manages the keys that encrypt payloads, results and error texts at rest.
func keysCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "keys", Short: "Encryption keys for payloads, results and error texts at rest"}
	cmd.AddCommand(&cobra.Command{
		Use:   "generate ID",
		Short: "Print a new random AES-256 key as ID=base64, for TASKFORGE_ENCRYPTION_KEYS",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			secret := make([]byte, 32)
			if _, err := rand.Read(secret); err != nil {
				return err
			}
			line := args[0] + "=" + base64.StdEncoding.EncodeToString(secret)
			if _, err := sealer.ParseKeys(line); err != nil {
				return exitError{2, err}
			}
			if _, err := sealer.New([]sealer.Key{{ID: args[0], Secret: secret}}); err != nil {
				return exitError{2, err}
			}
			cmd.Println(line)
			return nil
		},
	})
	var databaseURL, keys, keysFile string
	var batch int
	rotate := &cobra.Command{
		Use:   "rotate",
		Short: "Re-encrypt every payload, result and error text with the first key, in small batches",
		Long: `rotate seals every task's payload, result and error texts, and every schedule's payload,
with the first of the given keys:
plain ones (written before encryption was turned on) and ones sealed with an older key.
Put the new key first in TASKFORGE_ENCRYPTION_KEYS on every replica (keeping the old
ones), run rotate, then drop the old keys. Safe while replicas run: each batch is a
short transaction that skips rows locked by running statements.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if keysFile != "" {
				b, err := os.ReadFile(keysFile)
				if err != nil {
					return exitError{2, err}
				}
				keys = string(b)
			}
			if databaseURL == "" || keys == "" {
				return exitError{2, errors.New("--database-url and encryption keys ($TASKFORGE_ENCRYPTION_KEYS or --encryption-keys-file) are required")}
			}
			parsed, err := sealer.ParseKeys(keys)
			if err != nil {
				return exitError{2, err}
			}
			sl, err := sealer.New(parsed)
			if err != nil {
				return exitError{2, err}
			}
			pool, err := storage.Connect(cmd.Context(), databaseURL, 2)
			if err != nil {
				return err
			}
			defer pool.Close()
			if _, err := migrations.Apply(cmd.Context(), pool); err != nil {
				return err
			}
			store := storage.New(pool, storage.WithSealer(sl))
			total, after := 0, uuid.Nil
			for {
				n, last, err := store.Reseal(cmd.Context(), after, batch)
				if err != nil {
					return err
				}
				total += n
				if last == after {
					break
				}
				after = last
				fmt.Fprintf(cmd.ErrOrStderr(), "\rre-encrypted %d tasks", total)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "\r")
			cmd.Printf("re-encrypted %d tasks with key %s\n", total, sl.CurrentKey())
			schedules, err := store.ResealSchedules(cmd.Context())
			if err != nil {
				return err
			}
			if schedules > 0 {
				cmd.Printf("re-encrypted %d schedules with key %s\n", schedules, sl.CurrentKey())
			}
			secrets, err := store.ResealPushSecrets(cmd.Context())
			if err != nil {
				return err
			}
			if secrets > 0 {
				cmd.Printf("re-encrypted %d push secrets with key %s\n", secrets, sl.CurrentKey())
			}
			return nil
		},
	}
	rotate.Flags().StringVar(&databaseURL, "database-url", envOr("DATABASE_URL", ""), "PostgreSQL URL ($DATABASE_URL)")
	rotate.Flags().StringVar(&keysFile, "encryption-keys-file", envOr("TASKFORGE_ENCRYPTION_KEYS_FILE", ""), "file of id=base64 keys, the first sealing")
	rotate.Flags().IntVar(&batch, "batch", 500, "tasks per transaction")
	keys = os.Getenv("TASKFORGE_ENCRYPTION_KEYS")
	cmd.AddCommand(rotate)
	return cmd
}
