package api

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/gin-gonic/gin"
	"go.yaml.in/yaml/v4"
)

// openAPIYAML is the OpenAPI 3.1 contract of every route a replica serves
// (openapi.yaml); docs/api.md is its readable guide.
//
//go:embed openapi.yaml
var openAPIYAML []byte

// OpenAPIYAML returns the OpenAPI document as written, in YAML.
func OpenAPIYAML() []byte { return append([]byte(nil), openAPIYAML...) }

// openAPIJSON converts the document to the JSON that GET /openapi.json serves.
func openAPIJSON() ([]byte, error) {
	var doc any
	if err := yaml.Unmarshal(openAPIYAML, &doc); err != nil {
		return nil, fmt.Errorf("openapi.yaml: %w", err)
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("openapi.yaml as JSON: %w", err)
	}
	return b, nil
}

// serveOpenAPI answers GET /openapi.json with doc, the document converted once at
// start-up.
func serveOpenAPI(doc []byte) gin.HandlerFunc {
	return func(c *gin.Context) {
		c.Data(http.StatusOK, "application/json; charset=utf-8", doc)
	}
}
