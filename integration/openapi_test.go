package integration

import (
	"net/http"
	"os"
	"path/filepath"

	"github.com/aspd/aspd/internal/openapicheck"
)

// responseCheck checks every answer of an aspd a test started against the
// OpenAPI description (internal/openapicheck): installed by TestMain as
// http.DefaultTransport; startServer makes the test the owner of its aspd,
// so a mismatch fails that test.
var responseCheck *openapicheck.Transport

// installResponseCheck makes every default-transport request in this
// process go through the check, against docs/openapi.json (which server's
// TestOpenAPIFile keeps equal to what aspd serves at /openapi.json).
// Called once, from TestMain.
func installResponseCheck() error {
	doc, err := os.ReadFile(filepath.Join("..", "docs", "openapi.json"))
	if err != nil {
		return err
	}
	c, err := openapicheck.New(doc, http.DefaultTransport)
	if err != nil {
		return err
	}
	responseCheck = c
	http.DefaultTransport = c
	return nil
}
