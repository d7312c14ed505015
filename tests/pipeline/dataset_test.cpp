#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <fstream>

#include "stoker/core/error.hpp"
#include "stoker/pipeline/dataset.hpp"
#include "test_support.hpp"

namespace stoker {
namespace {
namespace fs = std::filesystem;
using test::TempDir;

void touch(const fs::path& p) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << "x";
}

TEST(DatasetFromDirectory, ClassesAreSortedFoldersAndFilesAreFoundRecursivelyInOrder) {
  TempDir dir;
  touch(dir / "dogs/b.jpg");
  touch(dir / "dogs/a.PNG");
  touch(dir / "dogs/sub/c.jpeg");
  touch(dir / "dogs/notes.txt");  // not an image extension
  touch(dir / "cats/z.bmp");
  touch(dir / "Birds/x.tif");
  const Dataset d = dataset_from_directory(dir.path());
  ASSERT_EQ(d.class_names, (std::vector<std::string>{"Birds", "cats", "dogs"}));
  ASSERT_EQ(d.size(), 5u);
  EXPECT_EQ(fs::path(d.samples[0].path).filename(), "x.tif");
  EXPECT_EQ(d.samples[0].label, 0);
  EXPECT_EQ(d.samples[1].label, 1);
  EXPECT_EQ(fs::path(d.samples[2].path).filename(), "a.PNG");
  EXPECT_EQ(fs::path(d.samples[3].path).filename(), "b.jpg");
  EXPECT_EQ(fs::path(d.samples[4].path).filename(), "c.jpeg");
  EXPECT_EQ(d.samples[4].label, 2);
}

TEST(DatasetFromDirectory, NestedFoldersComeInKerasOrder) {
  // Keras sorts os.walk's folders by path and each folder's files by name: "a/z.jpg" (folder "a")
  // comes before "a/b/y.jpg" (folder "a/b"), and "a-c/x.jpg" (folder "a-c", '-' < '/') before both
  // of "a/b"... as string order of the folder paths says. Sorting whole paths would interleave them.
  TempDir dir;
  touch(dir / "k/a/z.jpg");
  touch(dir / "k/a/b/y.jpg");
  touch(dir / "k/a-c/x.jpg");
  touch(dir / "k/m.jpg");
  touch(dir / "k/a b/w.jpg");
  const Dataset d = dataset_from_directory(dir.path());
  std::vector<std::string> rel;
  for (const auto& s : d.samples) rel.push_back(fs::relative(s.path, dir.path() / "k").generic_string());
  // Folders: "k" < "k/a" < "k/a b" < "k/a-c" < "k/a/b" (' ' < '-' < '/').
  EXPECT_EQ(rel, (std::vector<std::string>{"m.jpg", "a/z.jpg", "a b/w.jpg", "a-c/x.jpg", "a/b/y.jpg"}));
}

TEST(DatasetFromDirectory, ExplicitClassesKeepTheirOrder) {
  TempDir dir;
  touch(dir / "a/1.jpg");
  touch(dir / "b/1.jpg");
  DirectoryOptions o;
  o.classes = {"b", "a"};
  const Dataset d = dataset_from_directory(dir.path(), o);
  EXPECT_EQ(d.class_names, (std::vector<std::string>{"b", "a"}));
  EXPECT_EQ(d.samples[0].label, 0);
  EXPECT_NE(d.samples[0].path.find("/b/"), std::string::npos);
}

TEST(DatasetFromDirectory, ValidationSplitTakesTheFirstFractionOfEachClassLikeKeras) {
  TempDir dir;
  for (int i = 0; i < 10; ++i) touch(dir / ("a/" + std::to_string(i) + ".jpg"));
  for (int i = 0; i < 5; ++i) touch(dir / ("b/" + std::to_string(i) + ".jpg"));
  DirectoryOptions o;
  o.split = {0.25, Subset::Validation};
  const Dataset val = dataset_from_directory(dir.path(), o);
  // int(0.25 * 10) = 2 from a ("0.jpg", "1.jpg"), int(0.25 * 5) = 1 from b.
  ASSERT_EQ(val.size(), 3u);
  EXPECT_EQ(fs::path(val.samples[0].path).filename(), "0.jpg");
  EXPECT_EQ(fs::path(val.samples[1].path).filename(), "1.jpg");
  EXPECT_EQ(val.samples[2].label, 1);
  o.split.subset = Subset::Training;
  const Dataset train = dataset_from_directory(dir.path(), o);
  EXPECT_EQ(train.size(), 12u);
  for (const auto& t : train.samples)
    for (const auto& v : val.samples) EXPECT_NE(t.path, v.path);
}

TEST(DatasetFromDirectory, ClearErrors) {
  TempDir dir;
  EXPECT_THROW(dataset_from_directory(dir / "missing"), DatasetError);
  try {
    dataset_from_directory(dir.path());
    FAIL();
  } catch (const DatasetError& e) {
    EXPECT_NE(std::string(e.what()).find("no class sub-folders"), std::string::npos);
  }
  touch(dir / "cats/1.jpg");
  fs::create_directories(dir / "dogs");
  touch(dir / "dogs/readme.txt");
  try {
    dataset_from_directory(dir.path());
    FAIL();
  } catch (const DatasetError& e) {
    EXPECT_NE(std::string(e.what()).find("'dogs' holds no images"), std::string::npos) << e.what();
  }
  DirectoryOptions bad;
  bad.split = {1.5, Subset::Training};
  EXPECT_THROW(dataset_from_directory(dir.path(), bad), InvalidArgument);
}

// Following links, a loop (a link to the folder itself, one to an ancestor) would never end: each
// folder is listed once, and the links that lead back are named.
TEST(DatasetFromDirectory, FollowingLinksListsEachFolderOnceThroughLoops) {
  TempDir dir;
  const fs::path data = dir / "data";
  touch(data / "cats/a.jpg");
  touch(data / "cats/sub/b.jpg");
  fs::create_directory_symlink(".", data / "cats/self");
  fs::create_directory_symlink("..", data / "cats/sub/up");
  touch(data / "dogs/c.jpg");
  touch(dir / "more/d.jpg");
  fs::create_directory_symlink("../../more", data / "dogs/linked");  // no loop: followed
  DirectoryOptions follow;
  follow.follow_links = true;
  auto relative = [&](const std::vector<std::string>& paths) {
    std::vector<std::string> rel;
    for (const auto& p : paths) rel.push_back(fs::path(p).lexically_relative(data).generic_string());
    return rel;
  };
  std::vector<std::string> paths;
  for (const auto& s : dataset_from_directory(data, follow).samples) paths.push_back(s.path);
  EXPECT_EQ(relative(paths),
            (std::vector<std::string>{"cats/a.jpg", "cats/sub/b.jpg", "dogs/c.jpg", "dogs/linked/d.jpg"}));

  const ImageFiles cats = find_image_files(data / "cats", follow.extensions, true);
  EXPECT_EQ(relative(cats.files), (std::vector<std::string>{"cats/a.jpg", "cats/sub/b.jpg"}));
  std::vector<std::string> repeated = relative(cats.repeated_folders);
  std::sort(repeated.begin(), repeated.end());
  EXPECT_EQ(repeated, (std::vector<std::string>{"cats/self", "cats/sub/up"}));

  EXPECT_EQ(dataset_from_directory(data).size(), 3u) << "links to folders are not followed by default";
}

// A sub-folder that cannot be read stops the listing with its name, not a partial dataset.
TEST(DatasetFromDirectory, AnUnreadableSubFolderIsNamed) {
  if (::geteuid() == 0) GTEST_SKIP() << "root reads every folder";
  TempDir dir;
  touch(dir / "cats/a.jpg");
  touch(dir / "cats/locked/b.jpg");
  fs::permissions(dir / "cats/locked", fs::perms::none);
  try {
    dataset_from_directory(dir.path());
    ADD_FAILURE() << "no error";
  } catch (const DatasetError& e) {
    EXPECT_NE(std::string(e.what()).find((dir / "cats/locked").string()), std::string::npos) << e.what();
  }
  fs::permissions(dir / "cats/locked", fs::perms::owner_all);
}

TEST(DatasetFromCsv, ReadsPathAndLabelColumnsRelativeToTheBaseDirectory) {
  TempDir dir;
  std::ofstream(dir / "labels.csv") << "id,filename,class\n"
                                       "1,img/a.jpg,dog\n"
                                       "2,\"img/b, with comma.jpg\",cat\n"
                                       "3,/abs/c.jpg,\"dog\"\r\n"
                                       "\n";
  const Dataset d = dataset_from_csv(dir / "labels.csv");
  EXPECT_EQ(d.class_names, (std::vector<std::string>{"cat", "dog"}));
  ASSERT_EQ(d.size(), 3u);
  EXPECT_EQ(d.samples[0].path, (dir / "img/a.jpg").string());
  EXPECT_EQ(d.samples[0].label, 1);
  EXPECT_EQ(d.samples[1].path, (dir / "img/b, with comma.jpg").string());
  EXPECT_EQ(d.samples[1].label, 0);
  EXPECT_EQ(d.samples[2].path, "/abs/c.jpg");
}

TEST(DatasetFromCsv, TsvAndCustomColumnsAndBaseDir) {
  TempDir dir;
  std::ofstream(dir / "list.tsv") << "file\tlabel\nx.png\t1\ny.png\t0\n";
  CsvOptions o;
  o.path_column = "file";
  o.label_column = "label";
  o.base_dir = "/data";
  const Dataset d = dataset_from_csv(dir / "list.tsv", o);
  EXPECT_EQ(d.class_names, (std::vector<std::string>{"0", "1"}));
  EXPECT_EQ(d.samples[0].path, "/data/x.png");
  EXPECT_EQ(d.samples[0].label, 1);
}

TEST(DatasetFromCsv, ClearErrors) {
  TempDir dir;
  std::ofstream(dir / "a.csv") << "path,y\nx.jpg,1\n";
  try {
    dataset_from_csv(dir / "a.csv");
    FAIL();
  } catch (const DatasetError& e) {
    EXPECT_NE(std::string(e.what()).find("no column 'filename' (columns: path, y)"), std::string::npos) << e.what();
  }
  std::ofstream(dir / "b.csv") << "filename,class\n";
  EXPECT_THROW(dataset_from_csv(dir / "b.csv"), DatasetError);
  std::ofstream(dir / "c.csv") << "filename,class\n\"unterminated,1\n";
  EXPECT_THROW(dataset_from_csv(dir / "c.csv"), DatasetError);
  std::ofstream(dir / "d.csv") << "filename,class\nonlyone\n";
  EXPECT_THROW(dataset_from_csv(dir / "d.csv"), DatasetError);
  EXPECT_THROW(dataset_from_csv(dir / "missing.csv"), DatasetError);
}

// The message of the DatasetError that reading `file` throws ("" when it reads).
std::string csv_error(const fs::path& file) {
  try {
    dataset_from_csv(file);
  } catch (const DatasetError& e) {
    return e.what();
  }
  return "";
}

// Excel's "CSV UTF-8" starts with a byte order mark: pandas skips it, so the first column is named
// as it reads.
TEST(DatasetFromCsv, ALeadingByteOrderMarkIsSkipped) {
  TempDir dir;
  const std::string bom = "\xEF\xBB\xBF";
  std::ofstream(dir / "excel.csv") << bom + "filename,class\r\na.jpg,cat\r\n";
  const Dataset d = dataset_from_csv(dir / "excel.csv");
  EXPECT_EQ(d.class_names, (std::vector<std::string>{"cat"}));
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d.samples[0].path, (dir / "a.jpg").string());
  // Only at the file's start: elsewhere the bytes are part of a name.
  std::ofstream(dir / "inner.csv") << "filename,class\n" + bom + "b.jpg,cat\n";
  EXPECT_EQ(dataset_from_csv(dir / "inner.csv").samples[0].path, (dir / (bom + "b.jpg")).string());
}

// What pandas.read_csv (its default C parser) gives for this file, row by row:
// ['a"b.jpg', 'cat'], ['c,"d".jpg', 'dog'], ['multi\nline.jpg', 'cat'], ['ef.jpg', 'dog'],
// ['g.jpg', 'c"at'], ['h.jpg', 'dog'], ['i.jpg', 'cat'].
TEST(DatasetFromCsv, FieldsAreReadAsPandasReadsThem) {
  TempDir dir;
  std::ofstream(dir / "q.csv") << "filename,class\n"
                                  "a\"b.jpg,cat\n"             // a quote inside a field is a character
                                  "\"c,\"\"d\"\".jpg\",dog\n"  // quoted: the delimiter, doubled quotes
                                  "\"multi\nline.jpg\",cat\n"  // quoted: a line break
                                  "   \n"                      // only spaces: a blank line
                                  "\"e\"f.jpg,dog\n"           // after the closing quote, unquoted
                                  "g.jpg,\"c\"\"at\"\n"
                                  "\t\n"
                                  "h.jpg,dog\r\r"  // \r ends a line, and the next one is blank
                                  "i.jpg,cat";     // no line break at the end
  const Dataset d = dataset_from_csv(dir / "q.csv");
  const std::vector<std::pair<std::string, std::string>> pandas = {
      {"a\"b.jpg", "cat"}, {"c,\"d\".jpg", "dog"}, {"multi\nline.jpg", "cat"}, {"ef.jpg", "dog"}, {"g.jpg", "c\"at"},
      {"h.jpg", "dog"},    {"i.jpg", "cat"}};
  ASSERT_EQ(d.size(), pandas.size());
  for (std::size_t i = 0; i < pandas.size(); ++i) {
    EXPECT_EQ(d.samples[i].path, (dir / pandas[i].first).string()) << i;
    EXPECT_EQ(d.class_names.at(static_cast<std::size_t>(d.samples[i].label)), pandas[i].second) << i;
  }
}

// Every error names the line its record begins on, counted as an editor counts them: a quote inside
// a field opens nothing, a quoted line break and blank lines are counted.
TEST(DatasetFromCsv, ErrorsNameTheLineTheRecordBeginsOn) {
  TempDir dir;
  const fs::path f = dir / "list.csv";
  std::ofstream(f) << "filename,class\na\"b.jpg,cat\nc.jpg,dog\nonlyone\nd.jpg,cat\n";
  EXPECT_NE(csv_error(f).find(f.string() + ":4: 1 fields, expected at least 2"), std::string::npos) << csv_error(f);
  std::ofstream(f) << "filename,class\n\"two\nlines.jpg\",cat\n\n\"x.jpg\"\n";
  EXPECT_NE(csv_error(f).find(f.string() + ":5: 1 fields"), std::string::npos) << csv_error(f);
  std::ofstream(f) << "filename,class\na.jpg,cat\n\"b.jpg,dog\nc.jpg,cat\n";
  EXPECT_NE(csv_error(f).find(f.string() + ":3: a quoted field opened on this line has no closing quote"),
            std::string::npos)
      << csv_error(f);
  // More fields than the header: pandas refuses it ("Expected 2 fields in line 3, saw 3").
  std::ofstream(f) << "filename,class\na.jpg,cat\nb,c.jpg,dog\n";
  EXPECT_NE(csv_error(f).find(f.string() + ":3: 3 fields, but the header has 2"), std::string::npos) << csv_error(f);
  std::ofstream(f) << "filename,class\na.jpg,cat\n,dog\n";
  EXPECT_NE(csv_error(f).find(f.string() + ":3: empty 'filename'"), std::string::npos) << csv_error(f);
}

// An empty class cell (NaN in pandas) is refused naming the file, the line and the image, instead
// of becoming a class named "".
TEST(DatasetFromCsv, AnEmptyClassIsRefused) {
  TempDir dir;
  const fs::path f = dir / "list.csv";
  std::ofstream(f) << "filename,class\na.jpg,cat\nb.jpg,\nc.jpg,dog\n";
  EXPECT_NE(csv_error(f).find(f.string() + ":3: empty 'class' for b.jpg"), std::string::npos) << csv_error(f);
  std::ofstream(f) << "filename,class\na.jpg,cat\nb.jpg,\"\"\n";
  EXPECT_NE(csv_error(f).find(f.string() + ":3: empty 'class'"), std::string::npos) << csv_error(f);
  CsvOptions unlabelled;
  unlabelled.label_column.clear();
  EXPECT_EQ(dataset_from_csv(f, unlabelled).size(), 2u) << "without a class column the cell is not read";
}

TEST(DatasetFromDirectory, ClassFoldersAreTheSortedSubFolders) {
  TempDir dir;
  touch(dir / "b/x.jpg");
  touch(dir / "a/y.jpg");
  touch(dir / "notes.txt");
  EXPECT_EQ(class_folders(dir.path()), (std::vector<std::string>{"a", "b"}));
  EXPECT_THROW(class_folders(dir / "missing"), DatasetError);
}

TEST(DatasetFromList, ValidatesLabelsAndSplits) {
  EXPECT_THROW(dataset_from_list({}, {"a"}), DatasetError);
  EXPECT_THROW(dataset_from_list({{"x.jpg", 3}}, {"a", "b"}), DatasetError);
  const Dataset d = dataset_from_list({{"1.jpg", 0}, {"2.jpg", 0}, {"3.jpg", 1}, {"4.jpg", 1}}, {"a", "b"},
                                      Split{0.5, Subset::Validation});
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d.samples[0].path, "1.jpg");
  EXPECT_EQ(d.samples[1].path, "3.jpg");
}

}  // namespace
}  // namespace stoker
