package server

import (
	"testing"

	"github.com/taskforge/taskforge/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }
