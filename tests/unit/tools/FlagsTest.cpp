//===- FlagsTest.cpp - the kiln CLI's flag parser ---------------------------===//

#include "tools/kiln/lib/Flags.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace kiln::cli {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

struct Parsed {
  std::string file, output, size;
  bool dot = false;
  ParseResult result;
  std::string out, err;
};

Parsed run(std::vector<std::string> args) {
  Parsed p;
  FlagParser parser("kiln test", "FILE [options]", "A test command.");
  parser.addPositional("FILE", &p.file, "the input");
  parser.addValue("output", &p.output, "OUT", "where to write", 'o');
  parser.addValue("size", &p.size, "N", "a size");
  parser.addSwitch("dot", &p.dot, "a switch");
  llvm::raw_string_ostream out(p.out), err(p.err);
  p.result = parser.parse(args, out, err);
  return p;
}

TEST(FlagsTest, ValuesInBothSpellings) {
  Parsed p = run({"in.kiln", "--size=3", "-o", "x.mlir", "--dot"});
  EXPECT_EQ(p.result, ParseResult::ok);
  EXPECT_EQ(p.file, "in.kiln");
  EXPECT_EQ(p.size, "3");
  EXPECT_EQ(p.output, "x.mlir");
  EXPECT_TRUE(p.dot);
  p = run({"--size", "4", "--output=y", "in"});
  EXPECT_EQ(p.result, ParseResult::ok);
  EXPECT_EQ(p.size, "4");
  EXPECT_EQ(p.output, "y");
  EXPECT_EQ(p.file, "in");
  // `--` ends the flags.
  p = run({"--", "--odd-name"});
  EXPECT_EQ(p.result, ParseResult::ok);
  EXPECT_EQ(p.file, "--odd-name");
}

// parseOrExit: the exit code a command returns at once, or none to run.
TEST(FlagsTest, ParseOrExitCodes) {
  auto exitFor = [](std::vector<std::string> args) {
    std::string file, out, err;
    FlagParser parser("kiln test", "FILE", "A test command.");
    parser.addPositional("FILE", &file, "the input");
    llvm::raw_string_ostream os(out), es(err);
    return parser.parseOrExit(args, os, es);
  };
  EXPECT_EQ(exitFor({"in"}), std::nullopt);
  EXPECT_EQ(exitFor({"--help"}), std::optional<int>(0));
  EXPECT_EQ(exitFor({"in", "--nope"}), std::optional<int>(2));
  EXPECT_EQ(exitFor({}), std::optional<int>(2));
}

TEST(FlagsTest, UsageErrors) {
  Parsed p = run({"in", "--nope"});
  EXPECT_EQ(p.result, ParseResult::usageError);
  EXPECT_THAT(p.err, HasSubstr("kiln test: error: unknown flag '--nope'"));
  EXPECT_THAT(p.err, HasSubstr("Usage: kiln test FILE [options]"));
  EXPECT_EQ(run({}).result, ParseResult::usageError);
  EXPECT_THAT(run({}).err, HasSubstr("missing FILE"));
  EXPECT_THAT(run({"a", "b"}).err, HasSubstr("unexpected argument 'b'"));
  EXPECT_THAT(run({"a", "--size"}).err, HasSubstr("flag '--size' needs a value (N)"));
  EXPECT_THAT(run({"a", "--dot=1"}).err, HasSubstr("flag '--dot' takes no value"));
  EXPECT_THAT(run({"a", "-x"}).err, HasSubstr("unknown flag '-x'"));
}

TEST(FlagsTest, HelpListsOnlyItsOwnFlags) {
  Parsed p = run({"--help"});
  EXPECT_EQ(p.result, ParseResult::help);
  EXPECT_THAT(p.out, HasSubstr("-o, --output=OUT"));
  EXPECT_THAT(p.out, HasSubstr("--size=N"));
  EXPECT_THAT(p.out, HasSubstr("--dot"));
  EXPECT_THAT(p.out, HasSubstr("-h, --help"));
  EXPECT_THAT(p.out, ::testing::Not(HasSubstr("--layers")));
  EXPECT_TRUE(p.err.empty());
}

TEST(FlagsTest, ValueHelpers) {
  std::string err;
  llvm::raw_string_ostream errs(err);
  EXPECT_EQ(parseInteger("c", "n", "42", 1, errs), 42);
  EXPECT_FALSE(parseInteger("c", "n", "0", 1, errs));
  EXPECT_THAT(err, HasSubstr("c: error: --n=0: expected an integer >= 1, found '0'"));
  EXPECT_FALSE(parseInteger("c", "n", "4x", 1, errs));
  EXPECT_FALSE(parseInteger("c", "n", "", 1, errs));
  EXPECT_FALSE(parseInteger("c", "n", "99999999999999999999999", 1, errs));

  auto list = parseIntegerList("c", "layers", "784, 512,10", 1, errs);
  ASSERT_TRUE(list);
  EXPECT_THAT(*list, ElementsAre(784, 512, 10));
  EXPECT_FALSE(parseIntegerList("c", "layers", "784,,10", 1, errs));
  EXPECT_FALSE(parseIntegerList("c", "layers", "784,-1", 1, errs));

  EXPECT_EQ(parsePositiveReal("c", "lr", "1e-3", errs), 1e-3);
  EXPECT_FALSE(parsePositiveReal("c", "lr", "0", errs));
  EXPECT_FALSE(parsePositiveReal("c", "lr", "inf", errs));
  EXPECT_FALSE(parsePositiveReal("c", "lr", "nan", errs));
  EXPECT_FALSE(parsePositiveReal("c", "lr", "1e-3x", errs));

  // Sizes: decimal and binary units, fractions, plain bytes.
  EXPECT_EQ(parseByteSize("c", "memory-budget", "24GiB", errs),
            24ll * 1024 * 1024 * 1024);
  EXPECT_EQ(parseByteSize("c", "memory-budget", "1.5GB", errs), 1500000000ll);
  EXPECT_EQ(parseByteSize("c", "memory-budget", "3000MiB", errs),
            3000ll * 1024 * 1024);
  EXPECT_EQ(parseByteSize("c", "memory-budget", "512KB", errs), 512000ll);
  EXPECT_EQ(parseByteSize("c", "memory-budget", "2TB", errs), 2000000000000ll);
  EXPECT_EQ(parseByteSize("c", "memory-budget", "123456B", errs), 123456ll);
  EXPECT_EQ(parseByteSize("c", "memory-budget", "1e9", errs), 1000000000ll);
  EXPECT_EQ(parseByteSize("c", "memory-budget", " 4 GiB ", errs),
            4ll * 1024 * 1024 * 1024);
  for (const char *bad : {"", "0", "-1GB", "0.5B", "GiB", "12XB", "1.5 gigs",
                          "inf", "nan", "1e30"})
    EXPECT_FALSE(parseByteSize("c", "memory-budget", bad, errs)) << bad;
}

} // namespace
} // namespace kiln::cli
