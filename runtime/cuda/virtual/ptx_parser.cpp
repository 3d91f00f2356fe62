// Recursive-descent parser from PTX tokens to the ast:: tree (see ptx_ast.h).
#include <fmt/format.h>

#include "runtime/cuda/virtual/fault.h"
#include "runtime/cuda/virtual/ptx_ast.h"
#include "runtime/cuda/virtual/ptx_lexer.h"

namespace kiln::cuda::vgpu::ast {
namespace {

bool is_type_name(const std::string& t) {
  static const char* kTypes[] = {"b8",    "b16",  "b32",    "b64", "b128", "u8",   "u16",
                                 "u32",   "u64",  "s8",     "s16", "s32",  "s64",  "f16",
                                 "f16x2", "bf16", "bf16x2", "f32", "f64",  "pred", "tf32"};
  for (const char* k : kTypes)
    if (t == k) return true;
  return false;
}

class Parser {
 public:
  explicit Parser(const std::string& text) : toks_(lex_ptx(text)) {}

  Module parse_module() {
    Module m;
    bool is_extern = false;
    while (!at_end()) {
      const Token& t = peek();
      if (t.kind != Token::kIdent) fail("expected a directive");
      const std::string& d = t.text;
      if (d == ".version") {
        next();
        m.version = next().text;
      } else if (d == ".target") {
        next();
        m.target = next().text;
        while (accept(",")) next();
      } else if (d == ".address_size") {
        next();
        m.address_size = std::stoi(next().text);
      } else if (d == ".visible" || d == ".weak" || d == ".common") {
        next();
      } else if (d == ".extern") {
        next();
        is_extern = true;
        continue;
      } else if (d == ".entry" || d == ".func") {
        m.functions.push_back(parse_function());
      } else if (d == ".global" || d == ".const" || d == ".shared" || d == ".local") {
        VarDecl v = parse_var(space_of(next().text));
        v.is_extern = is_extern;
        expect(";");
        m.globals.push_back(std::move(v));
      } else if (d == ".file" || d == ".loc") {
        skip_line();
      } else if (d == ".section") {
        skip_section();
      } else if (d == ".pragma") {
        skip_to_semicolon();
      } else {
        fail(fmt::format("unsupported PTX directive '{}'", d));
      }
      is_extern = false;
    }
    return m;
  }

 private:
  std::vector<Token> toks_;
  std::size_t pos_ = 0;

  const Token& peek(std::size_t k = 0) const { return toks_[std::min(pos_ + k, toks_.size() - 1)]; }
  const Token& next() {
    const Token& t = peek();
    if (pos_ < toks_.size() - 1) ++pos_;
    return t;
  }
  bool at_end() const { return peek().kind == Token::kEnd; }
  bool is(const char* text) const { return peek().text == text && peek().kind != Token::kString; }
  bool accept(const char* text) {
    if (!is(text)) return false;
    next();
    return true;
  }
  [[noreturn]] void fail(const std::string& what) const {
    throw PtxError(
        fmt::format("PTX parse error at line {}: {} (at '{}')", peek().line, what, peek().text));
  }
  void expect(const char* text) {
    if (!accept(text)) fail(fmt::format("expected '{}'", text));
  }
  std::string expect_ident() {
    if (peek().kind != Token::kIdent) fail("expected a name");
    return next().text;
  }
  void skip_line() {
    int line = next().line;
    while (!at_end() && peek().line == line) next();
  }
  void skip_to_semicolon() {
    while (!at_end() && !is(";")) next();
    expect(";");
  }
  void skip_section() {
    while (!at_end() && !is("{")) next();
    int depth = 0;
    do {
      if (is("{")) ++depth;
      if (is("}")) --depth;
      next();
    } while (depth > 0 && !at_end());
  }

  static Space space_of(const std::string& d) {
    if (d == ".global") return Space::global;
    if (d == ".const") return Space::const_;
    if (d == ".shared") return Space::shared;
    if (d == ".local") return Space::local;
    if (d == ".param") return Space::param;
    return Space::reg;
  }

  std::int64_t parse_int() {
    bool neg = accept("-");
    if (peek().kind != Token::kNumber) fail("expected a number");
    std::string t = next().text;
    while (!t.empty() && (t.back() == 'U' || t.back() == 'u')) t.pop_back();
    std::int64_t v = static_cast<std::int64_t>(std::stoull(t, nullptr, 0));
    return neg ? -v : v;
  }

  // After the state-space directive: attributes, type, name, array / range, initializer.
  VarDecl parse_var(Space space) {
    VarDecl v;
    v.space = space;
    v.line = peek().line;
    while (peek().kind == Token::kIdent && peek().text[0] == '.') {
      std::string a = next().text.substr(1);
      if (a == "align") {
        v.align = static_cast<int>(parse_int());
      } else if (a == "v2" || a == "v4" || a == "v8") {
        v.vec = a[1] - '0';
      } else if (is_type_name(a)) {
        v.type = a;
      } else if (a == "ptr" || a == "global" || a == "shared" || a == "const" || a == "local" ||
                 a == "attribute" || a == "managed" || a == "unified") {
        if (accept("(")) skip_paren();
      } else {
        fail(fmt::format("unexpected variable attribute '.{}'", a));
      }
    }
    if (v.type.empty()) fail("variable without a type");
    v.name = expect_ident();
    if (accept("<")) {
      v.range = true;
      v.count = parse_int();
      expect(">");
    }
    while (accept("[")) {
      std::int64_t n = is("]") ? 0 : parse_int();
      expect("]");
      v.count = v.count < 0 ? n : v.count * n;
    }
    if (accept("=")) {
      v.has_init = true;
      parse_init(v.init);
    }
    return v;
  }
  void skip_paren() {
    int depth = 1;
    while (depth > 0 && !at_end()) {
      if (is("(")) ++depth;
      if (is(")")) --depth;
      next();
    }
  }
  void parse_init(std::vector<std::string>& out) {
    if (accept("{")) {
      if (!is("}")) {
        do parse_init(out);
        while (accept(","));
      }
      expect("}");
      return;
    }
    bool neg = accept("-");
    std::string t = next().text;
    if (t == "generic" && accept("(")) {  // generic(sym): an address, resolved by the decoder
      t = "&" + next().text;
      expect(")");
    }
    out.push_back(neg ? "-" + t : t);
  }

  std::vector<VarDecl> parse_param_list() {
    std::vector<VarDecl> out;
    expect("(");
    while (!is(")")) {
      std::string d = expect_ident();
      if (d != ".param" && d != ".reg") fail("expected .param");
      out.push_back(parse_var(Space::param));
      if (!accept(",")) break;
    }
    expect(")");
    return out;
  }

  Function parse_function() {
    Function f;
    f.line = peek().line;
    f.is_entry = next().text == ".entry";
    while (accept(".noreturn")) {
    }
    if (is("(")) f.retvals = parse_param_list();
    f.name = expect_ident();
    if (is("(")) f.params = parse_param_list();
    for (;;) {  // performance directives
      if (accept(".maxntid") || accept(".reqntid")) {
        bool req = toks_[pos_ - 1].text == ".reqntid";
        unsigned* dst = req ? f.reqntid : f.maxntid;
        dst[0] = dst[1] = dst[2] = 1;
        for (int i = 0; i < 3; ++i) {
          dst[i] = static_cast<unsigned>(parse_int());
          if (!accept(",")) break;
        }
      } else if (accept(".minnctapersm") || accept(".maxnreg") || accept(".maxnctapersm") ||
                 accept(".maxclusterrank")) {
        parse_int();
      } else if (accept(".reqnctapercluster")) {
        do parse_int();
        while (accept(","));
      } else if (accept(".explicitcluster") || accept(".noreturn")) {
      } else if (is(".pragma")) {
        next();
        skip_to_semicolon();
      } else {
        break;
      }
    }
    if (accept(";")) return f;  // declaration only
    f.has_body = true;
    expect("{");
    int depth = 1;
    while (depth > 0) {
      if (at_end()) fail(fmt::format("function '{}' is not closed", f.name));
      Statement s;
      s.line = peek().line;
      if (accept("{")) {
        ++depth;
        s.kind = Statement::kOpen;
        f.body.push_back(std::move(s));
        continue;
      }
      if (accept("}")) {
        if (--depth == 0) break;
        s.kind = Statement::kClose;
        f.body.push_back(std::move(s));
        continue;
      }
      const Token& t = peek();
      if (t.kind == Token::kIdent && t.text[0] == '.') {
        if (t.text == ".reg" || t.text == ".local" || t.text == ".shared" || t.text == ".param" ||
            t.text == ".const" || t.text == ".global") {
          Space sp = space_of(next().text);
          VarDecl first = parse_var(sp);
          std::vector<VarDecl> more;
          while (accept(",")) {  // .reg .b32 a, b, c<4>;
            VarDecl v = first;
            v.name = expect_ident();
            v.range = false;
            v.count = -1;
            if (accept("<")) {
              v.range = true;
              v.count = parse_int();
              expect(">");
            }
            more.push_back(v);
          }
          expect(";");
          s.kind = Statement::kDecl;
          s.decl = std::move(first);
          f.body.push_back(s);
          for (auto& v : more) {
            s.decl = std::move(v);
            f.body.push_back(s);
          }
        } else if (t.text == ".loc" || t.text == ".file") {
          skip_line();
        } else {
          skip_to_semicolon();  // .pragma, .callprototype, ...
        }
        continue;
      }
      if (t.kind == Token::kIdent && peek(1).text == ":" && peek(1).kind == Token::kPunct) {
        s.kind = Statement::kLabel;
        s.label = next().text;
        next();
        if (is(".callprototype"))
          skip_to_semicolon();
        else
          f.body.push_back(std::move(s));
        continue;
      }
      s.kind = Statement::kInstruction;
      s.instr = parse_instruction();
      f.body.push_back(std::move(s));
    }
    return f;
  }

  Instruction parse_instruction() {
    Instruction in;
    in.line = peek().line;
    if (accept("@")) {
      in.guard_neg = accept("!");
      in.guard = expect_ident();
    }
    in.opcode = expect_ident();
    if (!is(";")) {
      do in.operands.push_back(parse_operand());
      while (accept(","));
    }
    expect(";");
    return in;
  }

  Operand parse_operand() {
    Operand o;
    if (accept("[")) {
      o.kind = Operand::kMem;
      if (peek().kind == Token::kIdent) o.name = next().text;
      if (peek().kind == Token::kNumber || is("-")) {
        o.offset = parse_int();
      } else {
        while (accept("+")) o.offset += parse_int();
        if (is("-")) o.offset += parse_int();
      }
      expect("]");
      return o;
    }
    if (accept("{")) {
      o.kind = Operand::kVec;
      if (!is("}")) {
        do o.elems.push_back(parse_operand());
        while (accept(","));
      }
      expect("}");
      return o;
    }
    if (accept("(")) {
      o.kind = Operand::kList;
      if (!is(")")) {
        do o.elems.push_back(parse_operand());
        while (accept(","));
      }
      expect(")");
      return o;
    }
    if (is("-") || peek().kind == Token::kNumber) {
      o.kind = Operand::kImm;
      o.negative = accept("-");
      o.text = next().text;
      return o;
    }
    o.negated = accept("!");
    o.kind = Operand::kName;
    o.name = expect_ident();
    if (accept("|")) {
      Operand pair;
      pair.kind = Operand::kPair;
      pair.elems.push_back(std::move(o));
      pair.elems.push_back(parse_operand());
      return pair;
    }
    return o;
  }
};

}  // namespace

Module parse_ptx(const std::string& text) {
  return Parser(text).parse_module();
}

}  // namespace kiln::cuda::vgpu::ast
