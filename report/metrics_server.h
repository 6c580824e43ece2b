// MetricsServer: serves a RunMetrics (metrics.h) at http://ADDRESS:PORT/metrics in the
// Prometheus text format, through prometheus-cpp's pull Exposer (an embedded civetweb).
//
// The exposer answers from threads of its own (4) and only reads the registry; the manager's
// loop never waits for a scrape. A client has 2 s to send its request and take the answer,
// and one that stalls holds one thread, never the others' scrapes.
#pragma once

#include <memory>
#include <string>

#include "mitra/common/status.h"
#include "report/metrics.h"

namespace prometheus {
class Exposer;
}  // namespace prometheus

namespace mitra::report {

class MetricsServer {
 public:
  // Listens on `address` (IPv4: Debian's civetweb has no IPv6; 0.0.0.0 for every interface)
  // and `port` (0: one the kernel picks, see port()). An address that is not one of this
  // machine's, or a port that cannot be listened on (taken, or privileged), is InvalidArgument
  // naming --metrics-address or --metrics-port and the fix. `metrics` must outlive the server.
  static Result<std::unique_ptr<MetricsServer>> Start(const std::string& address, int port,
                                                      const RunMetrics& metrics);
  // Stops listening; a scrape in progress is finished first.
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  int port() const { return port_; }  // the port it listens on

 private:
  MetricsServer(std::unique_ptr<prometheus::Exposer> exposer, int port);

  std::unique_ptr<prometheus::Exposer> exposer_;
  int port_;
};

}  // namespace mitra::report
