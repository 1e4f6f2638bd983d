#include "backends/onednn/onednn_backend.h"

#include <utility>

#include "backends/onednn/onednn_engine.h"
#include "core/status_macros.h"

namespace attnkit {

absl::StatusOr<std::unique_ptr<Backend>> MakeOneDnnBackend(BlasOptions options) {
  ATTNKIT_ASSIGN_OR_RETURN(std::unique_ptr<onednn::OneDnnEngine> engine,
                           onednn::OneDnnEngine::Create());
  options.engine = std::move(engine);
  return std::unique_ptr<Backend>(std::make_unique<BlasBackend>(options));
}

}  // namespace attnkit
