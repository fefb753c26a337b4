// rc_redis_flood: one process of the two-process shared-limit tests. Reads a flood_config as JSON
// (argv[1]), floods the shared gate (flood.hpp) and writes the flood_result as JSON to argv[2].
#include <fstream>
#include <iostream>

#include "components/redis/flood.hpp"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: rc_redis_flood '<flood_config json>' <result file>\n";
    return 2;
  }
  try {
    const auto cfg = rc::test::flood_config::from_json(nlohmann::json::parse(argv[1]));
    const auto result = rc::test::run_flood(cfg);
    std::ofstream(argv[2]) << result.to_json().dump();
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "rc_redis_flood: " << e.what() << "\n";
    return 1;
  }
}
