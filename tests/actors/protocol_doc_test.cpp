// actors/PROTOCOL.md against actors/messages.h: every type and atom in the
// CAF type-ID block is documented. A type sent as a message (or an atom)
// needs a row of PROTOCOL.md's "## Messages" table (first column `name`, an
// atom's "`name` atom"); a type that is only a part of messages (a field
// type of another registered type, found by reading the struct bodies) must
// be named in backticks somewhere (the "## Payload types" table). Also: each
// row of the Messages table names a registered type or atom (no stale rows).
//
// Reads the source tree: TROUPE_SOURCE_DIR (compile definition), or the
// environment variable of the same name (to try the check on copies).
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

std::string source_dir() {
  if (const char* env = std::getenv("TROUPE_SOURCE_DIR"); env != nullptr && *env != '\0') return env;
  return TROUPE_SOURCE_DIR;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The text without // and /* */ comments (so a comment naming a type is not a field).
std::string strip_comments(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size();) {
    if (text.compare(i, 2, "//") == 0) {
      while (i < text.size() && text[i] != '\n') ++i;
    } else if (text.compare(i, 2, "/*") == 0) {
      const size_t end = text.find("*/", i + 2);
      i = end == std::string::npos ? text.size() : end + 2;
    } else {
      out += text[i++];
    }
  }
  return out;
}

struct registry {
  std::vector<std::string> types;  // CAF_ADD_TYPE_ID, in order
  std::vector<std::string> atoms;  // CAF_ADD_ATOM
  // Registered type -> the registered types whose struct bodies use it.
  std::map<std::string, std::vector<std::string>> used_in;
};

registry parse_messages_h(const std::string& raw) {
  registry reg;
  const std::string text = strip_comments(raw);
  const std::regex type_re(R"(CAF_ADD_TYPE_ID\s*\(\s*troupe\s*,\s*\(\s*troupe::(\w+)\s*\)\s*\))");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), type_re); it != std::sregex_iterator();
       ++it) {
    reg.types.push_back((*it)[1]);
  }
  const std::regex atom_re(R"(CAF_ADD_ATOM\s*\(\s*troupe\s*,\s*troupe::atoms\s*,\s*(\w+))");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), atom_re); it != std::sregex_iterator();
       ++it) {
    reg.atoms.push_back((*it)[1]);
  }
  // Struct bodies (brace-matched) and the registered types they mention.
  const std::set<std::string> registered(reg.types.begin(), reg.types.end());
  const std::regex struct_re(R"(struct\s+(\w+)\s*\{)");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), struct_re); it != std::sregex_iterator();
       ++it) {
    const std::string owner = (*it)[1];
    size_t pos = static_cast<size_t>(it->position(0) + it->length(0));
    const size_t begin = pos;
    for (int depth = 1; pos < text.size() && depth > 0; ++pos) {
      if (text[pos] == '{') ++depth;
      if (text[pos] == '}') --depth;
    }
    const std::string body = text.substr(begin, pos - begin);
    for (const std::string& t : registered) {
      if (t == owner) continue;
      if (std::regex_search(body, std::regex("\\b" + t + "\\b"))) reg.used_in[t].push_back(owner);
    }
  }
  return reg;
}

struct protocol_doc {
  std::vector<std::string> first_cells;  // the Messages table's first column, one a row
  std::string text;
};

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t");
  const size_t e = s.find_last_not_of(" \t\r");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

protocol_doc parse_protocol_md(const std::string& text) {
  protocol_doc doc;
  doc.text = text;
  std::istringstream in(text);
  std::string line;
  bool in_section = false, in_table = false;
  while (std::getline(in, line)) {
    if (line.rfind("## ", 0) == 0) {
      in_section = trim(line) == "## Messages";
      in_table = false;
      continue;
    }
    if (!in_section) continue;
    const std::string t = trim(line);
    if (t.empty() || t[0] != '|') {
      if (in_table) in_section = false;  // the first table of the section only
      continue;
    }
    const size_t second = t.find('|', 1);
    const std::string cell = trim(t.substr(1, second == std::string::npos ? std::string::npos
                                                                           : second - 1));
    if (!in_table) {  // the header row
      in_table = true;
      continue;
    }
    if (cell.find_first_not_of("-: ") == std::string::npos) continue;  // the separator row
    doc.first_cells.push_back(cell);
  }
  return doc;
}

std::vector<std::string> backticked(const std::string& s) {
  std::vector<std::string> out;
  const std::regex re("`([^`]+)`");
  for (auto it = std::sregex_iterator(s.begin(), s.end(), re); it != std::sregex_iterator(); ++it) {
    out.push_back((*it)[1]);
  }
  return out;
}

// One line per problem, naming the type or atom; empty when the docs are complete.
std::vector<std::string> check(const std::string& messages_h, const std::string& protocol_md) {
  const registry reg = parse_messages_h(messages_h);
  const protocol_doc doc = parse_protocol_md(protocol_md);
  std::set<std::string> row_types, row_atoms;
  for (const std::string& cell : doc.first_cells) {
    for (const std::string& name : backticked(cell)) {
      if (cell.find("`" + name + "` atom") != std::string::npos) row_atoms.insert(name);
      else row_types.insert(name);
    }
  }
  std::vector<std::string> problems;
  for (const std::string& t : reg.types) {
    auto used = reg.used_in.find(t);
    if (used == reg.used_in.end()) {
      if (row_types.count(t) == 0) {
        problems.push_back("messages.h registers `" + t +
                           "`, a message (no other registered type contains it), but "
                           "PROTOCOL.md's \"## Messages\" table has no row `" + t + "`");
      }
    } else if (doc.text.find("`" + t + "`") == std::string::npos) {
      std::string owners;
      for (const std::string& o : used->second) owners += (owners.empty() ? "" : ", ") + o;
      problems.push_back("messages.h registers `" + t + "`, a part of " + owners +
                         ", but PROTOCOL.md never names it in backticks (add it to "
                         "\"## Payload types\")");
    }
  }
  for (const std::string& a : reg.atoms) {
    if (row_atoms.count(a) == 0) {
      problems.push_back("messages.h registers the atom `" + a +
                         "`, but PROTOCOL.md's \"## Messages\" table has no row `" + a + "` atom");
    }
  }
  // Rows naming what messages.h no longer registers.
  const std::set<std::string> types(reg.types.begin(), reg.types.end());
  const std::set<std::string> atoms(reg.atoms.begin(), reg.atoms.end());
  for (const std::string& t : row_types) {
    if (types.count(t) == 0) {
      problems.push_back("PROTOCOL.md's \"## Messages\" table has a row `" + t +
                         "`, which messages.h does not register");
    }
  }
  for (const std::string& a : row_atoms) {
    if (atoms.count(a) == 0) {
      problems.push_back("PROTOCOL.md's \"## Messages\" table has a row `" + a +
                         "` atom, which messages.h does not register");
    }
  }
  return problems;
}

std::string joined(const std::vector<std::string>& lines) {
  std::string s;
  for (const std::string& l : lines) s += l + "\n";
  return s;
}

class protocol_doc_test : public ::testing::Test {
 protected:
  void SetUp() override {
    messages_h = read_text(source_dir() + "/actors/messages.h");
    protocol_md = read_text(source_dir() + "/actors/PROTOCOL.md");
    ASSERT_FALSE(messages_h.empty()) << "cannot read " << source_dir() << "/actors/messages.h";
    ASSERT_FALSE(protocol_md.empty()) << "cannot read " << source_dir() << "/actors/PROTOCOL.md";
  }

  // messages.h with `extra` added inside namespace troupe and `ids` at the
  // end of the type-ID block.
  std::string with_added(const std::string& extra, const std::string& ids) const {
    std::string text = messages_h;
    const size_t ns = text.find("namespace troupe {");
    const size_t end_block = text.find("CAF_END_TYPE_ID_BLOCK(troupe)");
    EXPECT_NE(ns, std::string::npos);
    EXPECT_NE(end_block, std::string::npos);
    text.insert(end_block, ids + "\n");
    text.insert(ns + std::string("namespace troupe {").size(), "\n" + extra + "\n");
    return text;
  }

  std::string messages_h, protocol_md;
};

TEST_F(protocol_doc_test, the_parsers_find_the_type_id_block_and_the_table) {
  const registry reg = parse_messages_h(messages_h);
  EXPECT_GE(reg.types.size(), 10u);
  EXPECT_GE(reg.atoms.size(), 3u);
  // Spot checks of the message/part split.
  EXPECT_EQ(reg.used_in.count("kv_transaction"), 0u);
  EXPECT_EQ(reg.used_in.count("step_plan"), 0u);
  ASSERT_EQ(reg.used_in.count("kv_grow"), 1u);
  EXPECT_EQ(reg.used_in.at("kv_grow"), std::vector<std::string>{"kv_transaction"});
  EXPECT_EQ(reg.used_in.count("fork_child"), 1u);
  // A comment naming a type does not make it a part (add_request_msg's
  // "receives request_output").
  EXPECT_EQ(reg.used_in.count("request_output"), 0u);
  EXPECT_GE(parse_protocol_md(protocol_md).first_cells.size(), 10u);
}

TEST_F(protocol_doc_test, every_registered_type_and_atom_is_documented) {
  const std::vector<std::string> problems = check(messages_h, protocol_md);
  EXPECT_TRUE(problems.empty()) << "actors/PROTOCOL.md is out of date with actors/messages.h:\n"
                                << joined(problems);
}

TEST_F(protocol_doc_test, an_undocumented_new_message_is_named) {
  const std::string text = with_added("struct probe_msg { int64_t x = 0; };",
                                      "CAF_ADD_TYPE_ID(troupe, (troupe::probe_msg))");
  const std::string problems = joined(check(text, protocol_md));
  EXPECT_NE(problems.find("`probe_msg`, a message"), std::string::npos) << problems;
}

TEST_F(protocol_doc_test, an_undocumented_new_part_is_named_with_its_carrier) {
  const std::string text = with_added(
      "struct probe_part { int64_t x = 0; };\n"
      "struct probe_carrier { std::vector<probe_part> parts;  // not a probe_msg\n};",
      "CAF_ADD_TYPE_ID(troupe, (troupe::probe_part))\n"
      "CAF_ADD_TYPE_ID(troupe, (troupe::probe_carrier))");
  const std::string problems = joined(check(text, protocol_md));
  EXPECT_NE(problems.find("`probe_part`, a part of probe_carrier"), std::string::npos) << problems;
  EXPECT_NE(problems.find("`probe_carrier`, a message"), std::string::npos) << problems;
}

TEST_F(protocol_doc_test, an_undocumented_new_atom_is_named) {
  const std::string text =
      with_added("", "CAF_ADD_ATOM(troupe, troupe::atoms, probe_atom, \"probe_atom\")");
  const std::string problems = joined(check(text, protocol_md));
  EXPECT_NE(problems.find("the atom `probe_atom`"), std::string::npos) << problems;
}

TEST_F(protocol_doc_test, a_row_for_an_unregistered_type_is_named) {
  std::string doc = protocol_md;
  const size_t table = doc.find("| --- |", doc.find("## Messages"));
  ASSERT_NE(table, std::string::npos);
  const size_t row = doc.find('\n', table) + 1;
  doc.insert(row, "| `gone_msg` | a → b | never | none |\n| `gone` atom | a → b | never | none |\n");
  const std::string problems = joined(check(messages_h, doc));
  EXPECT_NE(problems.find("a row `gone_msg`, which"), std::string::npos) << problems;
  EXPECT_NE(problems.find("a row `gone` atom, which"), std::string::npos) << problems;
}

}  // namespace
