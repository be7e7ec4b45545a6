// Command toolkit-web-server serves "ok" at / with exporter-toolkit's web package, the server that
// node_exporter and most Prometheus exporters run, so se-exporter's tests can put the same web config
// files to both servers and compare their answers. A config the toolkit refuses (web.Validate) prints
// "config: <error>" and exits 2, as se-exporter refuses it at load; else it listens on the address given
// (port 0: the test reads the port from /proc).
package main

import (
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"

	"github.com/prometheus/exporter-toolkit/web"
)

func main() {
	configFile := flag.String("web.config.file", "", "exporter-toolkit's web config file")
	listen := flag.String("web.listen-address", "127.0.0.1:0", "address to listen on")
	flag.Parse()
	if *configFile != "" {
		if err := web.Validate(*configFile); err != nil {
			fmt.Fprintf(os.Stderr, "config: %v\n", err)
			os.Exit(2)
		}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	server := &http.Server{Handler: mux}
	systemd := false
	flags := web.FlagConfig{WebListenAddresses: &[]string{*listen}, WebSystemdSocket: &systemd, WebConfigFile: configFile}
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := web.ListenAndServe(server, &flags, logger); err != nil {
		logger.Error("serving failed", "err", err)
		os.Exit(1)
	}
}
