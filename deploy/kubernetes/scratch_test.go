package kubernetes_test

import (
	"fmt"
	"os"
	"testing"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

func TestScratch(t *testing.T) {
	dir := os.Getenv("K")
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatal(err)
	}
	y, _ := m.AsYaml()
	fmt.Println(string(y))
}
