// Package clienttest holds the tests of the Go SDK (module
// github.com/taskforge/taskforge/client) that need a real TaskForge replica. They
// live in the server's module, not the SDK's, so that the SDK's module requires
// none of the server's dependencies (gin, pgx, chromedp, ...): a test there could
// not start a replica without requiring all of them. The SDK's own module keeps
// the tests that need no server. This package has no code of its own.
package clienttest
