-- pandoc filter for kb_bench formats (render_docx): raw HTML blocks read as the
-- HTML they are, since pandoc's DOCX writer drops raw HTML (a <div class="warning">
-- note would vanish from the document); images as their alt text (nothing fetched).
local function no_images(blocks)
  return pandoc.walk_block(pandoc.Div(blocks), {
    Image = function(img) return img.caption end,
  }).content
end

function RawBlock(el)
  if el.format == "html" then
    return no_images(pandoc.read(el.text, "html").blocks)
  end
end
