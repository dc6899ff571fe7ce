package api

import (
	"github.com/google/uuid"

	"github.com/taskforge/taskforge/client/wire"
)

// The API answers with the types of package wire, shared with the Go SDK and the
// tests, built from storage's rows by package internal/view, never with the rows
// themselves: a field added to storage.Task for the server's own use cannot leak
// into the API, and the JSON the SDK decodes is the JSON the server encodes
// (api/openapi.yaml is the contract both follow).

// errorDetail is the inside of an error body, and the error of one batch item.
type errorDetail = wire.ErrorDetail

// parseLease parses the task id and lease token of item i of a batch (what names
// it in the error: "acks[3]"; "" for a single report), both required.
func parseLease(item, taskID, leaseToken string) (uuid.UUID, uuid.UUID, error) {
	if item != "" {
		item += ": "
	}
	if taskID == "" || leaseToken == "" {
		return uuid.Nil, uuid.Nil, invalid("%stask_id and lease_token are required", item)
	}
	id, errID := uuid.Parse(taskID)
	token, errToken := uuid.Parse(leaseToken)
	if errID != nil || errToken != nil {
		return uuid.Nil, uuid.Nil, invalid("%stask_id and lease_token must be UUIDs", item)
	}
	return id, token, nil
}
